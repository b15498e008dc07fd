"""Programs people run beside training, from a checkout (not installed with the package).

``python -m producers.cluster``: a fake multi-node training cluster, one process per rank.
``python -m producers.training_loop``: a plain training loop that publishes and stops when asked.
"""
