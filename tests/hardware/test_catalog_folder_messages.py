"""--catalog given a file (say the gpus.yaml itself): the message says it is a file and to give its
folder, not that the folder was not found."""

import pytest

from scalesim.errors import InputError
from scalesim.hardware.user_catalog import catalog_for


def test_a_file_given_as_the_catalog_folder_is_named_as_a_file(tmp_path):
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text("{}\n")
    with pytest.raises(InputError) as err:
        catalog_for([gpus])
    assert err.value.file == str(gpus) and "is a file" in str(err.value) and "folder" in str(err.value)


def test_a_missing_folder_is_still_not_found(tmp_path):
    with pytest.raises(InputError) as err:
        catalog_for([tmp_path / "nope"])
    assert "not found" in str(err.value)


def test_a_folder_named_gpus_yaml_is_named_as_a_folder(tmp_path):
    """fuzz15: the catalog folder said it held neither gpus.yaml nor links.yaml."""
    (tmp_path / "gpus.yaml").mkdir()
    (tmp_path / "links.yaml").write_text("my-ib: {base: ib-ndr}\n")
    with pytest.raises(InputError) as err:
        catalog_for([tmp_path])
    assert err.value.file == str(tmp_path / "gpus.yaml") and "is a folder" in str(err.value)
