"""Test strings covering the cases the engine must get right, and a long code prompt."""

from pathlib import Path

CORPUS = [
    "def f(x):\n    return x + 1\n",
    "class Foo(Base):\n\tdef __init__(self, a, b=None):\n\t\tself.a = a  # note\r\n",
    "function add(a, b) { return a + b; }\nconst x = [1, 2, 3].map((v) => v * 2);\n",
    '#include <stdio.h>\nint main(void) { printf("%d\\n", 42); return 0; }\n',
    "Hello world! I'm here, they'll go. DON'T stop; we've done it, she'd say.",
    "12345 678 9 1000000 3.14159 0x1F 1e-9 2024-11-22",
    "   \t\n\n  x  \n    y\r\n\r\n\tz",
    "中文字符测试，日本語のテキスト、한국어 텍스트。",
    "emoji 😀👍🏽 ok 🇺🇸 family 👨‍👩‍👧",
    "a  b   c\r\n\r\nd      e",
    "<|endoftext|> <|im_start|>user\nhi<|im_end|> <｜begin▁of▁sentence｜>",
    "naïve café Ǆemo ﬁne Ⅻ ²³ ١٢٣",
    "x=1_000_000;y='''abc''';z=\"\"\"doc\"\"\"",
    "\u3000\u00a0nbsp\u2003em\u200bzero",
    "aaaaaaaaaaaaa bbbbbbbbbbbbbbbbbbbbbbbb ============ ------ ////////",
    "NUL\x00and\x01control\x7f",
    "self.assertEqual(result, expected)\nself.assertEq",
]

# text typed piece by piece into the covering tree by the speed and hash scripts: code,
# CJK, emoji, accents and runs of spaces (trees inside characters and on boundaries)
MIXED_PIECES = (
    "中文字符",
    "é",
    "ü",
    "🙂👍",
    " ",
    "    ",
    "\n",
    "x = 1",
    "def f(a):",
    "Ünïcode",
    "ñ",
    "—",
)


def repo_source_prompt(lines: int, root: Path) -> str:
    """``lines`` lines of the Python sources of the checkout at ``root`` (engine/, then
    midword/), the last one ending in the middle of a word: the long file the benchmarks
    open (``lines`` lines in all, the last one ``        return build_exp``).
    """
    sources = sorted((root / "engine").rglob("*.py")) + sorted((root / "midword").rglob("*.py"))
    text: list[str] = []
    for path in sources:
        text.extend(path.read_text(encoding="utf-8").splitlines())
        if len(text) >= lines:
            break
    return "\n".join(text[: lines - 1]) + "\n        return build_exp"
