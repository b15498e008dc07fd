"""Publishing from training frameworks: thin adapters over :class:`~streamwatch.publish.Publisher`.

Like the publisher, nothing here imports river, numpy or pydantic (the Hugging Face
callback imports transformers when it is installed: the trainer has loaded it anyway).
"""
