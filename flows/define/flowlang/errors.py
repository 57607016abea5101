"""Errors of the compact flow language (spec/11-flows.md §11).

Every error names where it is (`line`, `column`, 1-based) and has a stable code under
`flow.lang.`; the wording follows seed 004 where the seed names the error ("duplicate output
label 'x'")."""

from __future__ import annotations

from aos.flows.errors import FlowError


class FlowLangError(FlowError):
    """A `.flow` text that is not a flow: its code says why, `line` and `column` where."""

    code = "flow.lang.error"
    hint = "see spec/11-flows.md §11 for the flow language"

    def __init__(self, message: str, line: int, column: int, *, source: str | None = None) -> None:
        where = f"{source}:" if source else ""
        super().__init__(
            message, path=f"{where}{line}:{column}", line=line, column=column, source=source
        )
        self.line = line
        self.column = column


class FlowSyntaxError(FlowLangError):
    """The text does not follow the grammar (an unexpected token or character)."""

    code = "flow.lang.syntax"


class LiteralError(FlowLangError):
    """A parameter or resource literal that is not JSON or YAML as its delimiters say."""

    code = "flow.lang.literal"


class DuplicateOutputLabelError(FlowLangError):
    code = "flow.lang.duplicate_output_label"


class DuplicateInputLabelError(FlowLangError):
    code = "flow.lang.duplicate_input_label"


class AmbiguousMeetError(FlowLangError):
    """An output label on the line after its task: it may label the task's output or start
    the next statement (seed 004: a `;` disambiguates)."""

    code = "flow.lang.ambiguous_meet"
    hint = "end the statement with ';' before a line that starts with a label"


class ReservedLabelError(FlowLangError):
    code = "flow.lang.reserved_label"
    hint = ":start may only begin a statement and :end only end one"


class UnknownLabelError(FlowLangError):
    code = "flow.lang.unknown_label"


class DeclarationError(FlowLangError):
    """A declaration the language refuses: two `@flow`, an alias with a subflow, a task
    declared twice, declarations that expand into themselves."""

    code = "flow.lang.declaration"


class FlowLangLimitError(FlowLangError):
    """A flow over one of the language's bounds (nesting, invocations)."""

    code = "flow.lang.limit"


class UnboundTasksError(FlowLangError):
    """Task names that resolve to no workbook entry, `@task` with a `tool:`, or built-in."""

    code = "flow.lang.task_unbound"
    hint = "bind each task: a workbook entry {name, tool}, or @task NAME (- tool: {...} -)"
