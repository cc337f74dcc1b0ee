"""Generation bundles: a generative model exported as the components a decoding loop runs.

``components`` plans ``prefill`` and ``decode`` (and the encoder of an encoder-decoder); ``cache`` lays the
KV cache out as flat tensors; ``support`` says whether a model can be exported for generation at all;
``export`` exports and ships the components as one bundle; ``check`` compares ``generate()`` over the
loaded bundle (``exporters.bundle.decoding``) token for token with eager ``generate()``.
"""
