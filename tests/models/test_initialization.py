"""Modules that initialise themselves (`InitializesItself`) must say how, where they are defined."""

import pytest

from talk_hf.layers.initialization import InitializesItself


def test_a_subclass_without_init_weights_is_refused_where_it_is_defined():
    with pytest.raises(TypeError, match="Forgetful subclasses InitializesItself but defines no init_weights"):

        class Forgetful(InitializesItself):
            pass
