"""docs/hooks-python.md quotes the quick start's files as they are, and they work."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unittest

from support import KIT, ROOT

DOC = ROOT / "docs" / "hooks-python.md"
QUICKSTART = KIT / "examples" / "quickstart"
#: A fenced block the doc marks as a file's text: `<!-- file: PATH -->`, then the fence.
QUOTED_FILE = re.compile(r"<!-- file: (?P<path>\S+) -->\n```[a-z]*\n(?P<text>.*?)^```$",
                         re.DOTALL | re.MULTILINE)


def quoted_files() -> dict[str, str]:
    return {match["path"]: match["text"] for match in QUOTED_FILE.finditer(DOC.read_text())}


class QuickStartDoc(unittest.TestCase):
    def test_every_quoted_file_is_quoted_verbatim(self) -> None:
        quoted = quoted_files()
        self.assertTrue(quoted, "the doc marks no quoted file")
        for path, text in quoted.items():
            with self.subTest(path=path):
                self.assertEqual(text, (ROOT / path).read_text())

    def test_every_file_of_the_quick_start_is_quoted(self) -> None:
        files = {str(path.relative_to(ROOT)) for path in QUICKSTART.iterdir()
                 if path.is_file() and path.suffix in (".py", ".yaml")}
        self.assertEqual(files, set(quoted_files()))

    def test_the_quick_starts_own_tests_pass_in_plain_cpython(self) -> None:
        # As the doc runs them: from the hook's folder, with the kit on PYTHONPATH and no
        # stand-in for the component's bindings.
        env = dict(os.environ, PYTHONPATH=str(KIT), PYTHONDONTWRITEBYTECODE="1")
        result = subprocess.run([sys.executable, "-m", "unittest", "test_my_hook"],
                                cwd=QUICKSTART, env=env, capture_output=True, text=True,
                                check=False)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("Ran 2 tests", result.stderr)


if __name__ == "__main__":
    unittest.main()
