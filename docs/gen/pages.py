"""mkdocs-gen-files script: writes the generated reference pages (docs/gen/reference.py) into the build."""

import sys
from pathlib import Path

import mkdocs_gen_files

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference import PAGES  # noqa: E402

for page, make in PAGES.items():
    with mkdocs_gen_files.open(page, "w") as out:
        out.write(make())
