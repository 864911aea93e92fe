"""journal_engine is not on PyPI: it is installed from its checkout or an unpacked sdist, so every install
hint a user reads (the CLI's messages, docstrings, docs) says ``pip install '.[EXTRA]'``, never
``pip install 'journal_engine[EXTRA]'``, which fails."""
from __future__ import annotations

import re

from locations import ROOT

FROM_AN_INDEX = re.compile(r"""pip install ['"]journal_engine(\[|['"])""")


def test_no_install_hint_names_an_index_package():
    places = [*ROOT.glob("journal_engine/**/*.py"), *ROOT.glob("journal_engine/**/*.pyx"), *ROOT.glob("docs/**/*.md"),
              ROOT / "README.md"]
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in places
             for number, line in enumerate(path.read_text().splitlines(), 1) if FROM_AN_INDEX.search(line)]
    assert not found, "say pip install '.[EXTRA]' (from the checkout):\n" + "\n".join(found)
