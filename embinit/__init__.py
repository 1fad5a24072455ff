"""embinit: experiments on how a transformer's token-embedding layer should be initialized."""

__version__ = "0.1.0"
