#!/usr/bin/env python3
"""`ringctl ring --members FILE --svg OUT` (client/ctl_svg.c): the SVG is
well-formed SVG 1.1 with one legend swatch per node, is the same file for
the same membership, and, rendered to PNG by librsvg's rsvg-convert (a
real renderer), shows each node's colour over a fraction of the ring equal
to the keyspace share `ringctl ring` prints: 7,200 samples taken at the
annulus' mid radius, each matched to the nearest legend colour. A bad
membership file gives its file:line error and writes no SVG."""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

SVG_NS = "{http://www.w3.org/2000/svg}"
# The drawing's geometry (client/ctl_svg.c): viewBox width 1100, centre
# (360, 380), radii 300 and 190.
VIEW_W, CX, CY, R_MID = 1100.0, 360.0, 380.0, 245.0
SCALE = 2  # render at 2200 px wide


def png_pixels(path):
    """(width, height, rows of (r, g, b, a)) of an 8-bit RGB/RGBA PNG."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = ihdr
    if depth != 8 or ctype not in (2, 6) or interlace != 0:
        raise ValueError("unexpected PNG format %r" % (ihdr,))
    bpp = 4 if ctype == 6 else 3
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        ft = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ft == 1:
                line[i] = (line[i] + a) & 255
            elif ft == 2:
                line[i] = (line[i] + b) & 255
            elif ft == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ft == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def hex_rgb(s):
    return tuple(int(s[i:i + 2], 16) for i in (1, 3, 5))


def ring_shares(members):
    r = subprocess.run([lg.RINGCTL, "ring", "--members", members], capture_output=True,
                       text=True, timeout=60)
    out = {}
    for line in r.stdout.splitlines()[1:]:
        if line.startswith("#"):
            continue
        p = line.split("\t")
        out[p[0]] = float(p[5]) / 100
    return r.returncode, out


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def scenario(t, d):
    import math
    members = os.path.join(d, "r&d <five>.members")  # escaped in the title
    write(members, "epoch 7\nvnodes 12\nreplicas 2\n"
          "node alpha 10.0.0.1:11211 weight=1\nnode beta 10.0.0.2:11211 weight=3\n"
          "node gamma 10.0.0.3:11211 weight=2 zone=z2\nnode delta 10.0.0.4:11211 weight=1\n"
          "node eps.5 10.0.0.5:11211 weight=1\n")
    svg = os.path.join(d, "ring.svg")
    rc, shares = ring_shares(members)
    r = subprocess.run([lg.RINGCTL, "ring", "--members", members, "--svg", svg],
                       capture_output=True, text=True, timeout=60)
    if not t.ok(r.returncode == 0 and os.path.exists(svg) and rc == 0 and len(shares) == 5,
                "ringctl ring --svg: exit 0, the SVG written, the table printed as without it",
                (r.returncode, r.stderr[-300:], shares)):
        return
    tree = ET.parse(svg)
    root = tree.getroot()
    swatches = [e for e in root.iter(SVG_NS + "rect") if e.get("class") == "swatch"]
    arcs = [e for e in root.iter(SVG_NS + "path") if e.get("class") == "arc"]
    t.ok(root.tag == SVG_NS + "svg" and root.get("version") == "1.1"
         and len(swatches) == 5 and len(arcs) >= 5,
         "the SVG parses: an svg 1.1 root, 5 legend swatches, the ring's arcs", len(arcs))
    texts = "".join(e.text or "" for e in root.iter(SVG_NS + "text"))
    t.ok("r&d <five>.members: epoch 7, 5 nodes" in texts,
         "the title names the membership file (escaped: it parsed) and its epoch", texts[:120])
    t.ok(all(("%s  %.2f%%" % (n, s * 100)) in texts for n, s in shares.items()),
         "the legend names every node with its share", texts[:300])
    svg2 = os.path.join(d, "again.svg")
    subprocess.run([lg.RINGCTL, "ring", "--members", members, "--svg", svg2],
                   capture_output=True, timeout=60)
    with open(svg, "rb") as a, open(svg2, "rb") as b:
        t.ok(a.read() == b.read(), "the same membership draws the same file")

    rsvg = shutil.which("rsvg-convert")
    if rsvg is None:
        t.skip("rendered by rsvg-convert", "rsvg-convert is not installed (Debian: librsvg2-bin)")
    else:
        png = os.path.join(d, "ring.png")
        r = subprocess.run([rsvg, "-w", str(int(VIEW_W * SCALE)), "-o", png, svg],
                           capture_output=True, text=True, timeout=60)
        if t.ok(r.returncode == 0 and os.path.exists(png), "rsvg-convert renders it",
                r.stderr[-300:]):
            w, h, bpp, rows = png_pixels(png)
            t.ok(w == VIEW_W * SCALE, "the PNG is %d px wide" % (VIEW_W * SCALE), (w, h))
            order = [n for n in shares]  # membership order = legend order
            colours = {order[int(e.get("data-node"))]: hex_rgb(e.get("fill")) for e in swatches}

            def pixel(x, y):
                o = int(x) * bpp
                return tuple(rows[int(y)][o:o + 3])

            # Each legend swatch is on the picture in its colour.
            t.ok(all(pixel((float(e.get("x")) + 8) * SCALE, (float(e.get("y")) + 8) * SCALE)
                     == colours[order[int(e.get("data-node"))]] for e in swatches),
                 "every legend swatch is drawn in its node's colour")
            n_samples, counts, unmatched = 7200, {n: 0 for n in order}, 0
            for i in range(n_samples):
                a = (i + 0.5) * 2 * math.pi / n_samples
                px = pixel((CX + R_MID * math.sin(a)) * SCALE, (CY - R_MID * math.cos(a)) * SCALE)
                best = min(order, key=lambda n: sum((p - q) ** 2 for p, q in
                                                    zip(px, colours[n])))
                if sum((p - q) ** 2 for p, q in zip(px, colours[best])) > 3 * 40 ** 2:
                    unmatched += 1
                    continue
                counts[best] += 1
            frac = {n: counts[n] / n_samples for n in order}
            # 60 arcs, each edge anti-aliased over about a pixel of the
            # 3,079 px mid circle: at most ~1% moves between neighbours.
            worst = max(abs(frac[n] - shares[n]) for n in order)
            t.ok(unmatched <= n_samples * 0.01 and worst <= 0.01,
                 "the ring's pixels: each node's colour covers its share (max error %.4f, "
                 "%d of %d samples unmatched)" % (worst, unmatched, n_samples),
                 {"shares": shares, "pixels": frac})

    bad = os.path.join(d, "bad.members")
    write(bad, "epoch 1\nvnodes 12\nreplicas 2\nnode a 10.0.0.1:1\nnode a 10.0.0.2:1\n")
    out = os.path.join(d, "bad.svg")
    r = subprocess.run([lg.RINGCTL, "ring", "--members", bad, "--svg", out],
                       capture_output=True, text=True, timeout=60)
    t.ok(r.returncode != 0 and (bad + ":5") in r.stderr and not os.path.exists(out)
         and not os.path.exists(out + ".tmp"),
         "a membership with a duplicate id: its file:line error, exit non-zero, no SVG",
         (r.returncode, r.stderr[-300:]))
    r = subprocess.run([lg.RINGCTL, "ring", "--members", members, "--svg",
                        os.path.join(d, "no-such-dir", "x.svg")],
                       capture_output=True, text=True, timeout=60)
    t.ok(r.returncode == 1 and "no-such-dir" in r.stderr,
         "an SVG path in a missing directory: a clear error, exit 1", r.stderr[-300:])


def main():
    t = lg.Tap()
    lg.watchdog(120)
    d = tempfile.mkdtemp(prefix="rc-svg-")
    try:
        lg.run_tap(t, scenario, d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    t.done()


if __name__ == "__main__":
    main()
