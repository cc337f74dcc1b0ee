"""Generation bundles: a generative model exported as the components a decoding loop runs.

``components`` plans ``prefill`` and ``decode`` (and the encoder of an encoder-decoder); ``cache`` lays the
KV cache out as flat tensors; ``support`` says whether a model can be exported for generation at all;
``export`` exports and ships the components as one bundle; ``loop`` is ``generate()`` over loaded
components; ``check`` compares it token for token with eager ``generate()``.
"""
