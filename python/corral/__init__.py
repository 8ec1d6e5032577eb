"""corral's Python helpers.

Standard library only; PyTorch is imported only by ``corral.train.torch``
and only when one of its functions needs it.
"""

__version__ = "0.1.0"
