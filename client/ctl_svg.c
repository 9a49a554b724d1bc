/*
 * ctl_svg: `ringctl ring --svg FILE`, the ring as a picture. The hash
 * space runs clockwise from the top of a circle; every arc between two
 * consecutive points is painted in the colour of the node that owns its
 * keys (asked of the ring itself, at the arc's middle), consecutive arcs of
 * one owner merged into one path; a legend gives each node's colour and
 * share. The same membership always gives the same file.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/ctl_svg.h"
#include "client/ctl_util.h"

#define SVG_CX      360.0 /* circle centre */
#define SVG_CY      380.0
#define SVG_R_OUT   300.0
#define SVG_R_IN    190.0
#define SVG_LEGEND  720.0 /* x of the legend */
#define SVG_ROW     24.0  /* legend row height */
#define SVG_MAX_DEG 90.0  /* longest piece of one arc command */
#define TWO_POW_64  18446744073709551616.0

/* A palette that stays distinct for the first 12 nodes; later ones take
 * hues by the golden angle. */
static const char *const PALETTE[] = { "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                       "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                                       "#bcbd22", "#17becf", "#393b79", "#637939" };
#define N_PALETTE (sizeof(PALETTE) / sizeof(PALETTE[0]))

/* Node i's colour as "#rrggbb" into out[8]. */
static void
node_colour(uint32_t i, char *out)
{
    double h, s = 0.65, l = 0.45, c, x, m, r, g, b;

    if (i < N_PALETTE) {
        memcpy(out, PALETTE[i], 8);
        return;
    }
    h = fmod((double)i * 137.508, 360.0) / 60.0;
    c = (1 - fabs(2 * l - 1)) * s;
    x = c * (1 - fabs(fmod(h, 2.0) - 1));
    m = l - c / 2;
    r = h < 1 ? c : h < 2 ? x : h < 4 ? 0 : h < 5 ? x : c;
    g = h < 1 ? x : h < 3 ? c : h < 4 ? x : 0;
    b = h < 2 ? 0 : h < 3 ? x : h < 5 ? c : x;
    snprintf(out, 8, "#%02x%02x%02x", (unsigned)lround((r + m) * 255),
             (unsigned)lround((g + m) * 255), (unsigned)lround((b + m) * 255));
}

/* A point of the circle of radius rad at angle deg (0 at the top,
 * clockwise). */
static void
at(double deg, double rad, double *x, double *y)
{
    double a = deg * M_PI / 180.0;

    *x = SVG_CX + rad * sin(a);
    *y = SVG_CY - rad * cos(a);
}

/* One annulus sector [d0, d1] (d1 - d0 <= SVG_MAX_DEG) as path data. */
static void
sector(FILE *f, double d0, double d1)
{
    double x0, y0, x1, y1, x2, y2, x3, y3;

    at(d0, SVG_R_OUT, &x0, &y0);
    at(d1, SVG_R_OUT, &x1, &y1);
    at(d1, SVG_R_IN, &x2, &y2);
    at(d0, SVG_R_IN, &x3, &y3);
    fprintf(f, "M%.3f %.3fA%.0f %.0f 0 0 1 %.3f %.3fL%.3f %.3fA%.0f %.0f 0 0 0 %.3f %.3fZ", x0, y0,
            SVG_R_OUT, SVG_R_OUT, x1, y1, x2, y2, SVG_R_IN, SVG_R_IN, x3, y3);
}

/* The arc [d0, d1] of node `owner` as one path, cut into pieces of at
 * most SVG_MAX_DEG (one SVG arc command cannot go all the way round). */
static void
arc_path(FILE *f, double d0, double d1, uint32_t owner)
{
    char colour[8];

    node_colour(owner, colour);
    /* A hairline stroke of the same colour hides the renderer's anti-aliased
     * seams between neighbouring sectors. */
    fprintf(
        f,
        "<path class=\"arc\" data-node=\"%u\" fill=\"%s\" stroke=\"%s\" stroke-width=\"0.5\" d=\"",
        owner, colour, colour);
    while (d1 - d0 > SVG_MAX_DEG) {
        sector(f, d0, d0 + SVG_MAX_DEG);
        d0 += SVG_MAX_DEG;
    }
    sector(f, d0, d1);
    fputs("\"/>\n", f);
}

/* Text with &, < and > escaped (ids and addresses are plain, titles may
 * hold a file name). */
static void
xml_text(FILE *f, const char *s)
{
    for (; *s != '\0'; s++) {
        switch (*s) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            fputc(*s, f);
        }
    }
}

static int
write_svg(FILE *f, const struct ring *r, const double *share, const char *title)
{
    const struct ring_members *m = ring_members(r);
    uint32_t                   n = ring_n_points(r), i, run_owner = 0;
    double                     run_start = 0, prev_deg, height;
    bool                       in_run = false;
    uint64_t                   prev_pos;

    height = SVG_CY + SVG_R_OUT + 40;
    if (80 + SVG_ROW * (m->n_nodes + 2) > height) {
        height = 80 + SVG_ROW * (m->n_nodes + 2);
    }
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"1100\" "
            "height=\"%.0f\" viewBox=\"0 0 1100 %.0f\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n"
            "<text x=\"20\" y=\"34\" font-family=\"sans-serif\" font-size=\"20\">",
            height, height);
    xml_text(f, title);
    fprintf(f, "</text>\n<g id=\"ring\">\n");
    /* The arc ending at point i starts just after point i - 1 (for the
     * first point: after the last one, a full turn back). */
    ring_point(r, n - 1, &prev_pos, NULL, NULL);
    prev_deg = (double)prev_pos / TWO_POW_64 * 360.0 - 360.0;
    for (i = 0; i < n; i++) {
        uint64_t pos;
        uint32_t owner;
        double   deg;

        ring_point(r, i, &pos, NULL, NULL);
        /* Unsigned arithmetic wraps the first arc round zero. */
        owner = ring_primary(r, prev_pos + (pos - prev_pos) / 2 + 1);
        prev_pos = pos;
        deg = (double)pos / TWO_POW_64 * 360.0;
        if (in_run && owner != run_owner) {
            arc_path(f, run_start, prev_deg, run_owner);
            in_run = false;
        }
        if (!in_run) {
            run_start = prev_deg;
            run_owner = owner;
            in_run = true;
        }
        prev_deg = deg;
    }
    if (in_run) {
        arc_path(f, run_start, prev_deg, run_owner);
    }
    fprintf(f, "</g>\n<g id=\"legend\" font-family=\"sans-serif\" font-size=\"15\">\n");
    for (i = 0; i < m->n_nodes; i++) {
        char   colour[8];
        double y = 70 + SVG_ROW * i;

        node_colour(i, colour);
        fprintf(f,
                "<rect class=\"swatch\" data-node=\"%u\" x=\"%.0f\" y=\"%.0f\" width=\"16\" "
                "height=\"16\" fill=\"%s\"/>\n<text x=\"%.0f\" y=\"%.0f\">",
                i, SVG_LEGEND, y, colour, SVG_LEGEND + 24, y + 13);
        xml_text(f, m->nodes[i].id);
        fprintf(f, "  %.2f%%  ", share[i] * 100);
        xml_text(f, m->nodes[i].addr);
        fputs("</text>\n", f);
    }
    fprintf(f, "</g>\n</svg>\n");
    return ferror(f) ? -1 : 0;
}

int
ctl_ring_svg(const struct ring *r, const double *share, const char *members_path,
             const char *out_path)
{
    const struct ring_members *m = ring_members(r);
    char                       title[512], tmp[4096];
    FILE                      *f;
    int                        ret;

    snprintf(title, sizeof(title), "%s: epoch %llu, %u nodes, %u points, R=%u", members_path,
             (unsigned long long)m->epoch, m->n_nodes, ring_n_points(r), m->replicas);
    /* Written beside the target and renamed over it, so a reader never
     * sees half a picture and a failure leaves no file behind. */
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", out_path) >= (int)sizeof(tmp)) {
        ctl_error("ring --svg %s: path too long", out_path);
        return -1;
    }
    f = fopen(tmp, "w");
    if (f == NULL) {
        ctl_error("ring --svg %s: %s", out_path, strerror(errno));
        return -1;
    }
    ret = write_svg(f, r, share, title);
    if (fclose(f) != 0 || ret != 0) {
        ctl_error("ring --svg %s: write failed", out_path);
        remove(tmp);
        return -1;
    }
    if (rename(tmp, out_path) != 0) {
        ctl_error("ring --svg %s: %s", out_path, strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}
