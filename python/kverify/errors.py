"""Exception hierarchy of kverify (separate from verdicts: a verdict is a finding about a kernel,
an exception is a problem with kverify's input or with kverify itself).

KverifyError
  LoadError        a reference/candidate file or corpus row cannot be used (names file and reason)
  UsageError       bad command-line or API arguments
"""


class KverifyError(Exception):
    """Base class of kverify's own errors."""


class LoadError(KverifyError):
    """A problem or candidate cannot be loaded.

    Args:
        path: the file (or corpus ``FILE#ID``) at fault.
        reason: one line saying what is wrong, e.g. "no class ModelNew".
        detail: optional longer text (compiler output tail, traceback tail).
    """

    def __init__(self, path: str, reason: str, detail: str = ""):
        self.path, self.reason, self.detail = str(path), reason, detail
        super().__init__(f"{self.path}: {reason}")


class UsageError(KverifyError):
    """Invalid arguments (unknown gate id, bad device, ...)."""
