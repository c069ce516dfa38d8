"""The configuration the README shows is one a super-peer accepts (it had drifted: a key renamed
in the code stayed in the README, and copying it gave "unknown key")."""

import re
import tomllib
from pathlib import Path

from superpeer.config import config_from_mapping

README = Path(__file__).parents[2] / "README.md"


def test_every_toml_block_of_the_readme_is_a_valid_configuration():
    blocks = re.findall(r"```toml\n(.*?)```", README.read_text(), re.S)
    assert blocks
    for block in blocks:
        config_from_mapping(tomllib.loads(block))
