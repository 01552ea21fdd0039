"""An example xmfu plug-in: a Triton attention backend (my_attention.backend.MyAttention)."""

__version__ = "0.1.0"
