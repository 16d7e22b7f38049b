"""Exception hierarchy of kverify (separate from verdicts: a verdict is a finding about a kernel,
an exception is a problem with kverify's input or with kverify itself).

KverifyError
  LoadError        a reference/candidate file or corpus row cannot be used (names file and reason)
  UsageError       bad command-line or API arguments
BudgetSpent        (a BaseException) the check's time budget ran out before parent-side work
                   (an oracle run); kverify.check turns it into a gate ERROR "not established"
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


class BudgetSpent(BaseException):
    """The check's time budget (kverify.check.check(budget=...)) was spent before an oracle run.

    A BaseException so that no ``except Exception`` around foreign code (a reference that cannot
    run at some shape) takes it for a failure of the reference; kverify.check catches it per gate
    and records the gate as ERROR "not established" with the message, which holds
    kverify.journal.BUDGET_MARK (so the audit's --redo-budget finds the row).
    """
