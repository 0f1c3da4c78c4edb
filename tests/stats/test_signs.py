"""mmgrid.stats.signs: the one sign dissimilarity (Orbit Eq. 1), by hand."""

import torch

from mmgrid.stats.signs import sign_dissimilarity


def test_sign_dissimilarity_orbit_eq1_by_hand():
    """One definition (Orbit Eq. 1): counted where the reference is nonzero, sign(0) = 0."""
    x = [torch.tensor([1.0, -2.0, 0.0, 3.0, 4.0]), torch.tensor([[-1.0, 1.0]])]
    ref = [torch.tensor([1.0, 2.0, 5.0, 0.0, 4.0]), torch.tensor([[1.0, 1.0]])]
    # counted: 4 + 2 (ref[0][3] == 0); differing: x0[1] (opposite), x0[2] (0 vs 5), x1[0,0]
    assert sign_dissimilarity(x, ref) == 3 / 6
    masks = [torch.tensor([True, False, False, True, True]), torch.tensor([[False, True]])]
    # given masks decide what counts: x0[0], x0[3] (3 vs 0: signs +1 and 0 differ), x0[4], x1[0,1]
    assert sign_dissimilarity(x, ref, masks) == 1 / 4
    assert sign_dissimilarity([], []) == 0.0  # empty: nothing counted, nothing differs
