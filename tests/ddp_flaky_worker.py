"""A torchrun worker for tests/test_distributed.py: aborts (SIGABRT, no error report) the first
time it runs, as a rank killed during start-up would; on the next launch writes its result."""
import json
import os
import sys
from pathlib import Path

if __name__ == "__main__":
    marker = Path(os.environ["FLAKY_MARKER"])
    out = Path(sys.argv[sys.argv.index("--out") + 1])
    if not marker.exists():
        marker.write_text("aborted once")
        os.abort()
    out.write_text(json.dumps({"ok": True, "rank": int(os.environ.get("RANK", 0))}))
