"""The model families: TaLK (``models.talk``), DynamicConv/LightConv (``models.dynamic_conv``) and
SliceNet (``models.slicenet``).  Their shared encoder-decoder and LM classes are in ``conv_modeling``,
the description a family gives of its mixer in ``mixer_family``, the registry of model types in
``families``."""
