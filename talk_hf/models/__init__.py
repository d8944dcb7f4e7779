"""The model families: TaLK (``models.talk``) and DynamicConv/LightConv (``models.dynamic_conv``)."""
