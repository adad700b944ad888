"""Checks that the outputs docs/plugins.md shows are what the installed tools print.

The page's config (the YAML block under "Use them in a config") is run the way the page says, by
test_plugins_examples.sh, in a directory of its own; this compares the outputs with the page's
blocks: `dlinspect check config.yaml --layer model.layers.0.mlp.fc1`, the first lines of
logs/jsonl/rank-0.jsonl, the two modules' paragraphs of `dlinspect plugins --explain` and the error
of `max_abs: -1` (in both, the page's /opt/dli prefix read as the installed one).

usage: doc_blocks.py config DOC            prints the page's config
       doc_blocks.py stats-feature DOC     prints the page's statistics feature (C)
       doc_blocks.py compare DOC PLUGINDIR RUN_DIR
RUN_DIR holds check.out, explain.out, logs/jsonl/rank-0.jsonl and bad.out.
"""
import os
import sys

DOC_PLUGINDIR = "/opt/dli/lib/x86_64-linux-gnu/dlinspect/plugins"


def blocks_after(text, marker):
    """The fenced blocks after the first line holding `marker`, dedented, in order."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if marker in line)
    out, cur, indent = [], None, 0
    for line in lines[start + 1:]:
        stripped = line.lstrip()
        if stripped.startswith("```"):
            if cur is None:
                cur, indent = [], len(line) - len(stripped)
            else:
                out.append("\n".join(cur) + "\n")
                cur = None
            continue
        if cur is not None:
            cur.append(line[indent:])
    return out


def paragraphs(text, heads):
    """The blank-line separated paragraphs of `text` whose first line starts with one of heads."""
    out = []
    for para in text.split("\n\n"):
        if para.lstrip().startswith(heads):
            out.append(para.rstrip("\n") + "\n")
    return out


def same(what, want, got):
    if want == got:
        return True
    print(f"FAIL: docs/plugins.md's {what} is not what the tools print.\n--- page:\n{want}"
          f"--- printed:\n{got}---")
    return False


def compare(doc, plugindir, run):
    text = open(doc, encoding="utf-8").read()
    read = lambda name: open(os.path.join(run, name), encoding="utf-8").read()
    ok = same("`dlinspect check` output",
              blocks_after(text, "shows that ClampOutliers applies")[0], read("check.out"))
    want = [line for line in blocks_after(text, "logs/jsonl/rank-0.jsonl")[0].splitlines()
            if line != "..."]
    got = read("logs/jsonl/rank-0.jsonl").splitlines()[:len(want)]
    ok &= same("JSONL lines", "\n".join(want) + "\n", "\n".join(got) + "\n")
    want = blocks_after(text, "## See them in `dlinspect plugins --explain`")[0]
    want = want.replace(DOC_PLUGINDIR, plugindir)
    heads = ("clamp_outliers ", "jsonl ")
    ok &= same("`dlinspect plugins --explain` output", "\n".join(paragraphs(want, heads)),
               "\n".join(paragraphs(read("explain.out"), heads)))
    ok &= same("error for max_abs: -1",
               blocks_after(text, "**`clamp_create`.**")[0].replace(DOC_PLUGINDIR, plugindir),
               read("bad.out"))
    return 0 if ok else 1


if __name__ == "__main__":
    heading = {"config": "## Use them in a config", "stats-feature": "## A statistics feature"}
    if sys.argv[1] in heading:
        sys.stdout.write(blocks_after(open(sys.argv[2], encoding="utf-8").read(),
                                      heading[sys.argv[1]])[0])
        sys.exit(0)
    sys.exit(compare(*sys.argv[2:5]))
