"""`--average_last`: the mean of the last snapshots, and the weights given back."""

import torch
from common.averaging import WeightAverage


def test_weight_average_is_the_mean_of_the_last_snapshots_and_gives_the_weights_back():
    model = torch.nn.Linear(2, 2)
    average = WeightAverage(model, count=2)
    for value in (1.0, 2.0, 4.0):  # the first snapshot drops out
        torch.nn.init.constant_(model.weight, value)
        torch.nn.init.constant_(model.bias, -value)
        average.add()
    torch.nn.init.constant_(model.weight, 7.0)
    with average.swapped_in():
        assert torch.equal(model.weight, torch.full((2, 2), 3.0)) and torch.equal(model.bias, torch.full((2,), -3.0))
    assert torch.equal(model.weight, torch.full((2, 2), 7.0)) and torch.equal(model.bias, torch.full((2,), -4.0))
    restored = WeightAverage(model, count=2)
    restored.load_state_dict(average.state_dict())
    restored.add()  # still holds at most two: the 2.0 snapshot drops out
    with restored.swapped_in():
        assert torch.equal(model.weight, torch.full((2, 2), 5.5))
