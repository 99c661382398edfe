"""The Python images carry their modules' bytecode (imagelayers.compile_bytecode): a container imports from
it instead of compiling every module of torch on each start, and tracebacks name the image's paths."""

from __future__ import annotations

import importlib.util
import marshal
import sys

import pytest

from trainstack import imagelayers


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="bytecode for the image's Python 3.11 needs a 3.11 builder")
def test_bytecode_is_unchecked_hash_and_names_the_images_path(tmp_path):
    target = tmp_path / imagelayers.PYTHON_SITE
    (target / "pkg").mkdir(parents=True)
    (target / "pkg" / "__init__.py").write_text("def f():\n    return 1\n")
    (target / "pkg" / "template.py").write_text("{% not python %}\n")  # left to run time, no failure
    imagelayers.compile_bytecode(target)
    pyc = target / "pkg" / "__pycache__" / f"__init__.{sys.implementation.cache_tag}.pyc"
    data = pyc.read_bytes()
    assert data[:4] == importlib.util.MAGIC_NUMBER
    flags = int.from_bytes(data[4:8], "little")
    assert flags == 0b01, "hash-based and unchecked: the layer resets every mtime to 0"
    code = marshal.loads(data[16:])
    assert code.co_filename == f"/{imagelayers.PYTHON_SITE}/pkg/__init__.py"
    assert not (target / "pkg" / "__pycache__" / f"template.{sys.implementation.cache_tag}.pyc").exists()
