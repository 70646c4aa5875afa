"""How the bench modules run as scripts (`python -m hetflow.bench.NAME`): one line and exit 2
for an error of ours, as the `hetflow` command does, instead of a traceback."""
from __future__ import annotations

import sys
from typing import Callable

from hetflow.errors import HetflowError


def run_script(main: Callable[[], object], prog: str) -> None:
    try:
        main()
    except HetflowError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        sys.exit(130)
