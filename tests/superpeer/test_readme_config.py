"""The configuration the README shows is one the daemon accepts (it had drifted: a key renamed
in the code stayed in the README, and copying it gave "unknown key"). A block whose first line
says it is "in the peer's configuration" is a peer daemon's; every other one a super-peer's."""

import re
import tomllib
from pathlib import Path

from peer.config import load_config
from superpeer.config import config_from_mapping

README = Path(__file__).parents[2] / "README.md"
PEER_BLOCK = "in the peer's configuration"


def test_every_toml_block_of_the_readme_is_a_valid_configuration(tmp_path):
    blocks = re.findall(r"```toml\n(.*?)```", README.read_text(), re.S)
    assert blocks
    peer_blocks = [block for block in blocks if PEER_BLOCK in block.partition("\n")[0]]
    assert peer_blocks, f"no block says it is {PEER_BLOCK!r}"
    for block in blocks:
        if block in peer_blocks:
            path = tmp_path / "peer.toml"
            path.write_text(block, encoding="utf-8")
            load_config(str(path), data_dir=str(tmp_path / "data"))
        else:
            config_from_mapping(tomllib.loads(block))
