"""What reading a GGUF file's tokenizer leaves in a process (a llama.cpp server reads it
and nothing else with Python): not the ``gguf`` package (46 modules and PyYAML, 7 MiB
resident) nor the ``tokenizers`` library (5 MiB), unless the file needs them."""

from __future__ import annotations

import subprocess
import sys

import gguf
from midword.engine.gguf.reader import BLOCK_SIZES

from ..llama_vocab_support import vocab_file

_PROBE = """
import sys
from midword.engine import engine_for, load_tokenizer
engine_for(load_tokenizer(sys.argv[1]))
print(sorted({m.split(".")[0] for m in sys.modules} & {"gguf", "tokenizers", "yaml"}))
"""


def test_block_sizes_are_the_gguf_packages() -> None:
    """The reader sizes tensors with its own table: the package's values, type by type."""
    sizes = {int(kind): pair for kind, pair in gguf.constants.GGML_QUANT_SIZES.items()}
    assert {kind: sizes.get(kind) for kind in BLOCK_SIZES} == BLOCK_SIZES


def test_reading_qwen2s_tokenizer_imports_neither() -> None:
    path = vocab_file("qwen2")
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(path)], capture_output=True, text=True, check=True
    )
    assert out.stdout.split("\n")[-2] == "[]", out.stdout
