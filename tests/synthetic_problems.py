"""Three synthetic HumanEval-style problems (one cut mid-word, one after a space, one
elsewhere) for the `midword bench humaneval` tests: tiny, runnable, and each with a
suffix for the infilling task."""

from __future__ import annotations

PROBLEMS = [
    {  # cut mid-word
        "task_id": "Synthetic/0",
        "entry_point": "double",
        "prompt": 'def double(x):\n    """Twice x."""\n    ret',
        "canonical_solution": "urn 2 * x",
        "suffix": "\n",
        "test": "def check(candidate):\n    assert candidate(3) == 6\n",
    },
    {  # cut after a space
        "task_id": "Synthetic/1",
        "entry_point": "neg",
        "prompt": 'def neg(x):\n    """Minus x."""\n    return ',
        "canonical_solution": "-x",
        "suffix": "\n",
        "test": "def check(candidate):\n    assert candidate(2) == -2\n",
    },
    {  # cut elsewhere
        "task_id": "Synthetic/2",
        "entry_point": "total",
        "prompt": 'def total(xs):\n    """Sum of xs."""\n    s = 0\n    for x in xs:\n',
        "canonical_solution": "        s += x\n",
        "suffix": "    return s\n",
        "test": "def check(candidate):\n    assert candidate([1, 2, 3]) == 6\n",
    },
]
