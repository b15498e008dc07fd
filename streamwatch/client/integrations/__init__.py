"""Publishing from training frameworks: thin adapters over the publisher
(:class:`~streamwatch.client.publish.Publisher`).

Like the publisher, nothing here imports river, numpy or pydantic (the Hugging Face
callback imports transformers when it is installed: the trainer has loaded it anyway).
"""
