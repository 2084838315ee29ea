"""The README and the pages under docs/: every link leads somewhere, the manual cluster path comes early in the README,
and every command line they show parses as the scripts would parse it (nothing is started)."""
import ast
import contextlib
import glob
import importlib
import io
import os
import re
import shlex


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
DOCSTRINGS = ["launch.py", "main.py", "summary.py", "drawer.py"]  # the scripts' own, which show commands too
MANUAL_PATH_WITHIN = 150


def read(page):
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        text = f.read()
    return ast.get_docstring(ast.parse(text)) or "" if page.endswith(".py") else text


# ----------------------------------------------------------------------------------------------
# Markdown, as far as these pages use it


def split_code(text):
    """(prose lines, code lines) of a page, each as (line number, text): ``` fences and blocks indented by 4 spaces
    after a blank line are code."""
    prose, code = [], []
    fenced = indented = False
    previous_blank = True
    for number, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            previous_blank = False
            continue
        if fenced:
            code.append((number, line))
            continue
        if line.startswith("    ") and (indented or previous_blank):
            indented = True
            code.append((number, line[4:]))
        elif indented and not line.strip():
            code.append((number, ""))
        else:
            indented = False
            prose.append((number, line))
        previous_blank = not line.strip()
    return prose, code


def github_anchor(heading):
    """GitHub's anchor of a heading: its text without markup, lower case, every character but letters, digits,
    spaces, '-' and '_' dropped, each space a '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page):
    prose, _ = split_code(read(page))
    found, seen = set(), {}
    for _, line in prose:
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            anchor = github_anchor(match.group(1))
            count = seen.get(anchor, 0)
            seen[anchor] = count + 1
            found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*([^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")


def links(page):
    """(line number, target) of every inline link and image outside code."""
    prose, _ = split_code(read(page))
    text = "\n".join(line for _, line in prose)
    numbers = [number for number, _ in prose]
    text = re.sub(r"`[^`]*`", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)  # code spans, lines kept
    for match in LINK.finditer(text):
        yield numbers[text.count("\n", 0, match.start())], match.group(2)


def test_every_link_of_the_readme_and_the_docs_leads_to_a_file_and_a_heading_that_exist():
    broken = []
    for page in PAGES:
        folder = os.path.dirname(os.path.join(ROOT, page))
        for number, target in links(page):
            if re.match(r"(https?|mailto):", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(folder, path)) if path else os.path.join(ROOT, page)
            if not os.path.exists(resolved):
                broken.append(f"{page}:{number}: {target}: no such file {os.path.relpath(resolved, ROOT)}")
            elif anchor and resolved.endswith(".md") and anchor not in anchors(os.path.relpath(resolved, ROOT)):
                broken.append(f"{page}:{number}: {target}: no heading #{anchor} in {os.path.relpath(resolved, ROOT)}")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_anchor_rule_is_githubs():
    assert github_anchor("Table 1 in the paper's regime: `--hosts netns --comm-ratio 12`") == \
        "table-1-in-the-papers-regime---hosts-netns---comm-ratio-12"
    assert github_anchor("Several machines: the launcher with dmlc_tracker") == \
        "several-machines-the-launcher-with-dmlc_tracker"
    assert github_anchor("Hogwild!") == "hogwild"


def test_the_readme_shows_the_manual_cluster_path_within_its_first_lines():
    _, code = split_code(read("README.md"))
    first = {}
    for number, line in code:
        for start in ("DMLC_ROLE=scheduler", "DMLC_ROLE=server", "DMLC_ROLE=worker",
                      "python SimpleStateServer/manage.py runserver", "python summary.py", "python drawer.py"):
            if line.startswith(start):
                first.setdefault(start, number)

    assert set(first) == {"DMLC_ROLE=scheduler", "DMLC_ROLE=server", "DMLC_ROLE=worker",
                          "python SimpleStateServer/manage.py runserver", "python summary.py", "python drawer.py"}
    assert first["DMLC_ROLE=scheduler"] <= MANUAL_PATH_WITHIN, f"the manual path starts at README.md:{first}"
    assert max(first.values()) <= MANUAL_PATH_WITHIN, f"README.md: the manual path's lines: {first}"


# ----------------------------------------------------------------------------------------------
# Command lines

PYTHONS = {"python", "python3", ".venv/bin/python", ".venv/bin/python3"}
SCRIPTS = {"main.py", "launch.py", "summary.py", "drawer.py", "config.py"}
SEPARATORS = {"&&", "||", ";", "&", "|", ":", ">", ">>"}  # ':' separates mpiexec's MPMD blocks


def command_lines(text):
    """(line number, shell line) of every code line, a line ending in '\\' joined with the next."""
    _, code = split_code(text)
    joined, pending, start = [], "", None
    for number, line in code:
        start = start if pending else number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        if pending or line.strip():
            joined.append((start, pending + line))
        pending = ""
    return joined


def expand_loop(line):
    """`for f in 1 1 4; do CMD & done; wait`: CMD with its first value for $f."""
    match = re.match(r"\s*for (\w+) in ([^;]+); do (.*)", line)
    if not match:
        return line
    name, values, body = match.groups()
    return re.sub(rf"\$(\{{{name}\}}|{name}\b)", values.split()[0], body)


def script_calls(line):
    """(script, argv) of every `python SCRIPT ARGS` in a shell line, whatever precedes it (VAR=value, sudo, mpiexec
    and its options); ARGS end at a shell separator."""
    tokens = shlex.split(expand_loop(line), comments=True)
    for i, token in enumerate(tokens[:-1]):
        if token in PYTHONS and tokens[i + 1] in SCRIPTS:
            argv = []
            for word in tokens[i + 2:]:
                if word in SEPARATORS or word in ("done", "done;"):
                    break
                if word[-1:] in (";", "&"):
                    argv.append(word[:-1])
                    break
                argv.append(word)
            yield tokens[i + 1], argv


def placeholder(argv):
    """A command shown with elided, generic or optional parts (`...`, `<mode>`, `[--check]`) is not meant to run as
    it stands."""
    return (any(word in ("...", "…") or re.search(r"<[^<>]+>", word) for word in argv)
            or bool(re.search(r"\[[^\[\]]+\]", " ".join(argv))))


def parse_launch(argv, monkeypatch):
    from launcher import dmlc, experiment
    from launcher.studies import paper, regime_map, sweep, tune

    if argv[:1] == ["paper"]:
        return paper.parse(argv[1:])
    if argv[:1] == ["regimes"]:
        # --resume reads an earlier map's logs on this machine (a check of the machine, not of the command line)
        monkeypatch.setattr(regime_map, "check_resumable", lambda log_dir, plan: None)
        return regime_map.parse(argv[1:])
    if argv[:1] == ["sweep"]:
        return sweep.parse(argv[1:])
    if argv[:1] == ["tune"]:
        return tune.parse(argv[1:])
    if argv[:1] == ["study"]:
        from launcher.studies import registry

        return registry.parse(argv[1:])
    if argv[:1] in (["noise-scale"], ["rate-sweep"]):
        return importlib.import_module(f"launcher.studies.{argv[0].replace('-', '_')}").parse(argv[1:])
    if argv[:1] == ["docs"]:
        from analysis import doc_tables

        return doc_tables.parse(argv[1:])
    if argv[:1] == ["calibrate"]:
        from launcher import calibrate

        return calibrate.parse_calibration(argv[1:])
    if argv[:1] == ["submit"]:
        from dmlc_tracker import opts
        return opts.get_opts(argv[1:])
    if argv[:1] == ["task"]:
        return dmlc.task_parser().parse_args(dmlc.split_at_double_dash(argv[1:])[0])
    if argv[:1] == ["clean-netns"]:
        # it has no parser: it takes at most a prefix, and anything else is its usage line (netns.clean_command)
        assert len(argv) <= 2 and argv[1:2] != ["-h"], "launch.py clean-netns takes at most a PREFIX"
        return argv
    return experiment.parse(argv)  # the launcher's own checks of this machine (preflight) are not run


def parse(script, argv, monkeypatch):
    from analysis import figures, summary
    from training import config

    if script in ("main.py", "config.py"):
        return config.parse_args(argv)
    if script == "summary.py":
        return summary.parse_args(argv)
    if script == "drawer.py":
        return figures.parse_args(argv)
    return parse_launch(argv, monkeypatch)


def shown_commands():
    for page in PAGES + DOCSTRINGS:
        for number, line in command_lines(read(page)):
            for script, argv in script_calls(line):
                yield page, number, line, script, argv


def test_every_command_line_of_the_readme_and_the_docs_parses(monkeypatch):
    from training.checks import UsageError

    failed, parsed = [], 0
    for page, number, line, script, argv in shown_commands():
        if placeholder(argv):
            continue
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                parse(script, argv, monkeypatch)
            parsed += 1
        except SystemExit as error:
            failed.append(f"{page}:{number}: python {script} {shlex.join(argv)}\n    exit {error.code}: "
                          f"{stderr.getvalue().strip()}")
        except (UsageError, ValueError, AssertionError) as error:
            failed.append(f"{page}:{number}: python {script} {shlex.join(argv)}\n    {type(error).__name__}: {error}")

    assert not failed, "command lines that do not parse:\n" + "\n".join(failed)
    assert parsed >= 40  # the pages show that many; far fewer means the code blocks were not found


def test_the_command_finder_sees_through_environments_loops_and_mpiexec():
    lines = dict(command_lines("text\n\n    DMLC_ROLE=worker ... python main.py -c 1 \\\n        -m sync\n"))
    assert lines == {3: "DMLC_ROLE=worker ... python main.py -c 1      -m sync"}
    assert list(script_calls("for f in 1 1 4; do DMLC_ROLE=worker python main.py --slowdown $f -e 0 & done; wait")) \
        == [("main.py", ["--slowdown", "1", "-e", "0"])]
    assert list(script_calls(".venv/bin/mpiexec -n 2 .venv/bin/python main.py -m esync : -n 1 .venv/bin/python "
                             "main.py -m esync --slowdown 4")) == [("main.py", ["-m", "esync"]),
                                                                   ("main.py", ["-m", "esync", "--slowdown", "4"])]
    assert list(script_calls("sudo .venv/bin/python launch.py regimes   # the full map")) == [("launch.py", ["regimes"])]
    assert list(script_calls("python -m bench.run --quick")) == []
    assert placeholder(["-m", "sync", "..."]) and placeholder(["-b", "logs/<mode>"]) and not placeholder(["-m", "sync"])


def test_every_tuned_file_a_command_of_the_docs_names_is_one_of_the_repository():
    """A shown command that reads searched values (--tuned) reads the copy committed beside the results: it runs on
    any clone, and so does the test that parses it."""
    named = [(page, argv[argv.index("--tuned") + 1]) for page, _, _, _, argv in shown_commands() if "--tuned" in argv]
    assert named
    outside = [(page, path) for page, path in named
               if os.path.isabs(path) or not os.path.isfile(os.path.join(ROOT, path))]
    assert outside == []


def test_the_docs_stay_within_45_thousand_words():
    words = sum(len(read(os.path.relpath(path, ROOT)).split())
                for path in glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))

    assert words <= 45_000, f"docs/ holds {words} words: the numbers belong in results/<study>/, the past in git"


def test_the_readme_is_read_in_one_sitting():
    lines = read("README.md").count("\n")

    assert lines < 150, f"README.md holds {lines} lines: the detail belongs in docs/"
