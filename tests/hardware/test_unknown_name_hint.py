"""An unknown GPU or link in a scenario says how to add one of your own, not only the built-in names."""

import pytest

from scalesim.errors import InputError
from scalesim.hardware.user_catalog import builtin_catalog


@pytest.mark.parametrize("lookup, name, file", [("gpu", "rtx5090-oc", "gpus.yaml"),
                                                ("link", "pcie-gen7", "links.yaml")])
def test_an_unknown_name_points_to_base_mappings_and_catalog_folders(lookup, name, file):
    with pytest.raises(InputError) as err:
        getattr(builtin_catalog(), lookup)(name, key="cluster.node.gpu")
    message = str(err.value)
    assert "base: NAME" in message and "--catalog" in message and file in message
