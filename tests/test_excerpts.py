"""Source excerpts (quantgemm_kernels/excerpts.py): the markers in csrc/ are well-formed, every
excerpt a notebook asks for exists, and a missing or broken marker is reported with its file.

The notebooks are scanned, not run: every call of ``show_excerpt``/``excerpt`` (and every
``show_diff``/``diff`` side given as a ``(source, name)`` pair) in their code cells is resolved from
literals, ``qk.KERNELS["..."]`` or a name the notebook assigns one of those to.
"""

import ast
from pathlib import Path

import nbformat
import pytest

from quantgemm_kernels import excerpts
from quantgemm_kernels.excerpts import ExcerptError

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXCERPT_CALLS = {"show_excerpt", "excerpt"}
DIFF_CALLS = {"show_diff", "diff"}


def _code(cell_source: str) -> str:
    """A code cell without IPython's magics and shell lines, so that ast can parse it."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in cell_source.splitlines())


def _resolve(node, names: dict):
    """A source argument as a value excerpts accepts: a str, or None when it cannot be resolved."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id in names:
        return _resolve(names[node.id], names)
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "KERNELS"
        and isinstance(node.slice, ast.Constant)
    ):
        return node.slice.value  # qk.KERNELS["name"]: the kernel's name
    return None


def _notebook_requests(path: Path) -> list[tuple[str, int, object, object]]:
    """(notebook, cell, source, excerpt name) for every excerpt a notebook asks for, in order."""
    nb = nbformat.read(path, as_version=4)
    names: dict = {}
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        tree = ast.parse(_code(cell.source))
        for node in ast.walk(tree):  # assignments first, so a name set in this cell resolves
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                names[node.targets[0].id] = node.value
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            fn = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if fn in EXCERPT_CALLS and len(node.args) >= 2:
                pairs = [node.args[:2]]
            elif fn in DIFF_CALLS:
                pairs = [a.elts for a in node.args[:2] if isinstance(a, ast.Tuple) and len(a.elts) == 2]
            else:
                continue
            for src, name in pairs:
                found.append((path.name, i, _resolve(src, names), _resolve(name, names)))
    return found


REQUESTS = [r for nb in NOTEBOOKS for r in _notebook_requests(nb)]


def test_notebooks_ask_for_excerpts():
    asked = {nb for nb, *_ in REQUESTS}
    assert {"03_w4a16.ipynb", "04_w4a8.ipynb", "06_tensor_cores.ipynb"} <= asked, asked


@pytest.mark.parametrize("nb, cell, source, name", REQUESTS, ids=[f"{r[0]}:{r[1]}:{r[3]}" for r in REQUESTS])
def test_every_excerpt_a_notebook_asks_for_exists(nb, cell, source, name):
    assert source is not None and name is not None, (
        f"{nb} cell {cell}: the excerpt's source and name must be literals, qk.KERNELS[...] or a name "
        "assigned one of those, so that this test can check them"
    )
    e = excerpts.excerpt(source, name)
    assert e.text.strip(), f"{nb} cell {cell}: excerpt {name!r} of {excerpts.rel(e.path)} is empty"


def test_markers_in_csrc_are_well_formed():
    found = excerpts.all_markers()  # raises ExcerptError, naming the file and line, on the first bad one
    assert found, "no excerpt markers under csrc/"
    for path, names in found.items():
        lines = path.read_text().splitlines()
        for name, (first, last) in names.items():
            assert lines[first - 2].strip() == f"// [excerpt: {name}]", (path, name)
            assert lines[last].strip() == f"// [end excerpt: {name}]", (path, name)


def test_every_marked_excerpt_is_used():
    """A marker nobody asks for is a stale comment in a kernel source."""
    asked = {(excerpts.source_path(s).resolve(), n) for _, _, s, n in REQUESTS}
    marked = {(p.resolve(), n) for p, names in excerpts.all_markers().items() for n in names}
    assert not marked - asked, sorted((excerpts.rel(p), n) for p, n in marked - asked)


# ---- the module on small files ------------------------------------------------------------------


def _write(tmp_path, text, name="k.cu"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_excerpt_text_lines_and_printed_header(tmp_path, capsys):
    p = _write(
        tmp_path,
        "// header\nint a;\n  // [excerpt: body]\n  int b;\n  // [excerpt: inner]\n  int c;\n"
        "  // [end excerpt: inner]\n  // [end excerpt: body]\n",
    )
    e = excerpts.excerpt(p, "body")
    assert (e.first, e.last) == (4, 7) and e.text == "  int b;\n  int c;"  # nested markers left out
    assert excerpts.excerpt(p, "inner").text == "  int c;"
    excerpts.show_excerpt(p, "inner")
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith("k.cu, lines 6-6 ---") and out.splitlines()[1] == "  int c;"


@pytest.mark.parametrize(
    "text, message",
    [
        ("int a;\n", "has no excerpt 'x'"),
        ("// [excerpt: x]\nint a;\n", "excerpt 'x' is never closed"),
        ("int a;\n// [end excerpt: x]\n", r"without its '\[excerpt: x\]'"),
        ("// [excerpt: x]\na;\n// [end excerpt: x]\n// [excerpt: x]\nb;\n// [end excerpt: x]\n", "marked twice"),
        ("// [excerpt: x ]\na;\n// [end excerpt]\n", "malformed excerpt marker"),
        ("// [excerpt x]\na;\n", "malformed excerpt marker"),
    ],
)
def test_errors_name_the_file_and_the_marker(tmp_path, text, message):
    p = _write(tmp_path, text)
    with pytest.raises(ExcerptError, match=message) as info:
        excerpts.excerpt(p, "x")
    assert "k.cu" in str(info.value)


def test_sources_by_kernel_name_and_by_file_name():
    assert excerpts.source_path("mma.cuh") == excerpts.source_path("cuda/06_decode_tensor_cores/mma.cuh")
    assert excerpts.rel(excerpts.source_path("mma.cuh")).startswith("csrc/")
    naive = excerpts.source_path("cuda_q4_0_q8_1_naive")
    assert excerpts.source_path("04_w4a8/1_naive.cu") == naive == excerpts.source_path("cuda/04_w4a8/1_naive.cu")
    with pytest.raises(ExcerptError, match="ambiguous"):  # every chapter folder has a 1_naive.cu
        excerpts.source_path("1_naive.cu")
    with pytest.raises(ExcerptError, match="no source file"):
        excerpts.source_path("no_such_file.cuh")
    with pytest.raises(ExcerptError, match="neither a registered kernel"):
        excerpts.source_path("no_such_kernel")


def test_diff_leaves_out_headers_and_markers(tmp_path):
    a = _write(tmp_path, "// header a\nint x;\n// [excerpt: e]\nint y;\n// [end excerpt: e]\n", "a.cu")
    b = _write(tmp_path, "// header b, longer\n\nint x;\nint y2;\n", "b.cu")
    body = [line for line in excerpts.diff(a, b).splitlines() if not line.startswith(("---", "+++", "@@"))]
    assert "-int y;" in body and "+int y2;" in body
    assert not any("excerpt" in line or "header" in line for line in body), body
    assert excerpts.diff((a, "e"), b).splitlines()[1:] == [
        f"+++ {excerpts.rel(b)}",
        "@@ -1 +1,2 @@",
        "-int y;",
        "+int x;",
        "+int y2;",
    ]


def _stored_excerpts(path: Path) -> list[tuple[str, int, str, int, int, list[str]]]:
    """(notebook, cell, file under csrc/, first, last, the printed lines) of every excerpt header
    ``--- csrc/FILE, lines A-B ---`` in a notebook's stored outputs, with the lines printed after
    it up to the next header or a blank line."""
    nb = nbformat.read(path, as_version=4)
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
        lines = text.splitlines()
        for j, line in enumerate(lines):
            head = excerpts.HEADER.match(line)
            if head:
                body = []
                for nxt in lines[j + 1 :]:
                    if not nxt.strip() or excerpts.HEADER.match(nxt):
                        break
                    body.append(nxt)
                found.append((path.name, i, head[1], int(head[2]), int(head[3]), body))
    return found


STORED = [s for nb in NOTEBOOKS for s in _stored_excerpts(nb)]


def test_notebooks_store_excerpts():
    assert len(STORED) >= 50  # the chapters print their code this way: a scan that finds none is broken


@pytest.mark.parametrize("nb,cell,file,first,last,body", STORED, ids=[f"{s[0]}-{s[1]}-{s[3]}" for s in STORED])
def test_stored_excerpts_match_the_sources(nb, cell, file, first, last, body):
    """An excerpt the book shows (a cell's stored output) is what the file holds at those lines
    today: a source edited since the cell last ran (a longer header comment moves every excerpt
    below it) fails here, until the cell is run again (tools/execute_cells.py)."""
    path = excerpts.PACKAGE / file
    assert path.exists(), f"{nb} cell {cell}: {file} no longer exists"
    now = [line for line in path.read_text().splitlines()[first - 1 : last] if not excerpts.is_marker(line)]
    assert body == now[: len(body)] and len(body) >= min(len(now), 1), (
        f"{nb} cell {cell}: the stored excerpt of {file}, lines {first}-{last}, differs from the file; "
        "run the cell again (tools/execute_cells.py)"
    )
