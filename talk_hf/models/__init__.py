"""The model families: TaLK (``models.talk``), DynamicConv/LightConv (``models.dynamic_conv``) and
SliceNet (``models.slicenet``); their shared encoder-decoder and LM classes are in ``conv_modeling``."""
