#!/usr/bin/env python3
"""A terminal's screen (tmux capture-pane -e -p: text with ANSI SGR codes) drawn as an SVG, for
the README's picture of `troupe top`. Knows what troupe top uses: bold, reverse, the 8 colours
and their bright forms, reset.

    tmux capture-pane -e -p -t SESSION | scripts/ansi_to_svg.py > docs/images/troupe_top.svg
"""
import html
import re
import sys

FG, BG = "#d4d4d4", "#1e1e1e"
COLOURS = ["#1e1e1e", "#f14c4c", "#23d18b", "#f5f543", "#3b8eea", "#d670d6", "#29b8db", "#e5e5e5"]
CHAR_W, LINE_H, FONT = 8.4, 18, 14  # a 14 px monospace cell
SGR = re.compile(r"\x1b\[([0-9;]*)m")
OTHER = re.compile(r"\x1b\[[0-9;?]*[A-Za-ln-z]")  # any other control sequence (not SGR's m)


def runs(line):
    """(text, bold, fg, reverse) pieces of one line."""
    bold, fg, reverse = False, None, False
    pos = 0
    for m in SGR.finditer(line):
        if m.start() > pos:
            yield line[pos:m.start()], bold, fg, reverse
        for code in [int(c) if c else 0 for c in m.group(1).split(";")]:
            if code == 0:
                bold, fg, reverse = False, None, False
            elif code == 1:
                bold = True
            elif code == 7:
                reverse = True
            elif code == 22:
                bold = False
            elif code == 27:
                reverse = False
            elif 30 <= code <= 37:
                fg = COLOURS[code - 30]
            elif 90 <= code <= 97:
                fg = COLOURS[code - 90]
            elif code == 39:
                fg = None
        pos = m.end()
    if pos < len(line):
        yield line[pos:], bold, fg, reverse


def main():
    lines = [OTHER.sub("", l.rstrip("\n")) for l in sys.stdin]
    while lines and not SGR.sub("", lines[-1]).strip():
        lines.pop()
    width = max((len(SGR.sub("", l)) for l in lines), default=1)
    w, h = int(width * CHAR_W + 24), int(len(lines) * LINE_H + 24)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}">',
           f'<rect width="{w}" height="{h}" rx="6" fill="{BG}"/>',
           f'<g font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" font-size="{FONT}" xml:space="preserve">']
    for row, line in enumerate(lines):
        y = 12 + row * LINE_H
        col = 0
        for text, bold, fg, reverse in runs(line):
            x = 12 + col * CHAR_W
            colour = fg or FG
            if reverse:
                out.append(f'<rect x="{x:.1f}" y="{y + 2}" width="{len(text) * CHAR_W:.1f}" height="{LINE_H}" fill="{colour}"/>')
                colour = BG
            weight = ' font-weight="bold"' if bold else ""
            if text.strip():
                out.append(f'<text x="{x:.1f}" y="{y + LINE_H - 3}" fill="{colour}"{weight}>{html.escape(text)}</text>')
            col += len(text)
    out += ["</g>", "</svg>"]
    print("\n".join(out))


if __name__ == "__main__":
    main()
