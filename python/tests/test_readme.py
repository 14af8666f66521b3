"""The README's Python blocks run as written (the README's Rust blocks are checked by
tests/tests/readme.rs)."""

import os
import re

README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")


def python_blocks():
    with open(README) as f:
        text = f.read()
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)


def test_the_readme_has_a_python_block():
    assert len(python_blocks()) >= 1


def test_every_python_block_of_the_readme_runs():
    for i, block in enumerate(python_blocks()):
        scope = {"__name__": f"readme_block_{i}"}
        exec(compile(block, f"README.md python block {i}", "exec"), scope)
