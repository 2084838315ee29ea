"""The tables the summaries, the figures, the launcher and the benchmark print: plain text padded into columns, and
markdown."""


def format_cell(value, spec, missing="-"):
    """A number formatted by `spec`, or `missing` where there is none."""
    return missing if value is None else format(value, spec)


def text_table(headers, rows):
    """Columns padded to their widest cell; the first left-aligned, the others right-aligned."""
    lines = [headers] + rows
    widths = [max(len(str(cell)) for cell in column) for column in zip(*lines)]
    return "\n".join("  ".join(str(cell).ljust(w) if i == 0 else str(cell).rjust(w)
                               for i, (cell, w) in enumerate(zip(line, widths))) for line in lines)


def markdown_table(headers, rows):
    """A header row, its separator and one row per list of cells (text)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
