/* The graph view's layered layout in C: the same algorithm as `workbench.graphs.layout._sugiyama_py`
 * (ranks, dummy trunks, barycentre sweeps, dot-style mincross with weighted medians and
 * transpositions, x coordinates), step for step, so both give the same drawing to the bit
 * (tests/test_graph_layout_native.py checks it on real graphs). Python keeps the reference
 * and reads the graph; this module only turns (edges, tie order, widths) into positions.
 *
 * One entry point: sugiyama(m, es, ed, vpos, width, sweeps) with es/ed/vpos int64 buffers and
 * width a float64 buffer; returns (x float64[m], rank int64[m], bend_ptr int64[E+1],
 * bend_x float64[B], crossings) as bytes objects (numpy.frombuffer reads them).
 *
 * Memory: every allocation of one call comes from an arena freed at the end (or on failure).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>

typedef int64_t i64;

#define DUMMY_WIDTH 0.2
#define GAP 0.25
#define RANK_SWEEP_LIMIT 80000
#define FULL_SWEEPS_LIMIT 12000
#define RACE_MARGIN 1.5

/* ---------------------------------------------------------------- arena */
typedef struct { char *head; jmp_buf fail; } Arena;
#define HDR 16  /* each block: the previous block's address, padded to 16 bytes */

static void *amalloc(Arena *A, size_t bytes) {
    char *b = (char *)malloc(HDR + (bytes ? bytes : 1));
    if (!b) longjmp(A->fail, 1);
    *(char **)b = A->head;
    A->head = b;
    return b + HDR;
}
static void afree_all(Arena *A) {
    char *b = A->head;
    while (b) { char *n = *(char **)b; free(b); b = n; }
    A->head = NULL;
}
#define NEWI(A, n) ((i64 *)amalloc((A), sizeof(i64) * (size_t)(n)))
#define NEWD(A, n) ((double *)amalloc((A), sizeof(double) * (size_t)(n)))
#define NEWC(A, n) ((char *)amalloc((A), (size_t)(n)))
static i64 *zeros_i(Arena *A, i64 n) { i64 *p = NEWI(A, n); memset(p, 0, sizeof(i64) * (size_t)n); return p; }
static double *zeros_d(Arena *A, i64 n) { double *p = NEWD(A, n); memset(p, 0, sizeof(double) * (size_t)n); return p; }
static char *zeros_c(Arena *A, i64 n) { char *p = NEWC(A, n); memset(p, 0, (size_t)n); return p; }
static i64 *copy_i(Arena *A, const i64 *s, i64 n) { i64 *p = NEWI(A, n); if (n) memcpy(p, s, sizeof(i64) * (size_t)n); return p; }

/* ---------------------------------------------------------------- stable sorts */
typedef int (*cmp_fn)(i64 a, i64 b, const void *ctx);  /* <0, 0, >0 */

static void msort_rec(i64 *v, i64 *tmp, i64 n, cmp_fn cmp, const void *ctx) {
    if (n < 2) return;
    if (n <= 16) {  /* insertion sort: stable */
        for (i64 i = 1; i < n; i++) {
            i64 x = v[i], j = i - 1;
            while (j >= 0 && cmp(v[j], x, ctx) > 0) { v[j + 1] = v[j]; j--; }
            v[j + 1] = x;
        }
        return;
    }
    i64 h = n / 2;
    msort_rec(v, tmp, h, cmp, ctx);
    msort_rec(v + h, tmp, n - h, cmp, ctx);
    if (cmp(v[h - 1], v[h], ctx) <= 0) return;
    memcpy(tmp, v, sizeof(i64) * (size_t)h);
    i64 i = 0, j = h, k = 0;
    while (i < h && j < n) v[k++] = (cmp(v[j], tmp[i], ctx) < 0) ? v[j++] : tmp[i++];
    while (i < h) v[k++] = tmp[i++];
}
static void msort(Arena *A, i64 *v, i64 n, cmp_fn cmp, const void *ctx) {
    if (n < 2) return;
    i64 *tmp = NEWI(A, n / 2 + 1);
    msort_rec(v, tmp, n, cmp, ctx);
}

/* stable counting sort of 0..n-1 by an integer key in [0, range) */
static i64 *argsort_count(Arena *A, const i64 *key, i64 n, i64 range) {
    i64 *cnt = zeros_i(A, range + 1), *o = NEWI(A, n);
    for (i64 i = 0; i < n; i++) cnt[key[i] + 1]++;
    for (i64 r = 0; r < range; r++) cnt[r + 1] += cnt[r];
    for (i64 i = 0; i < n; i++) o[cnt[key[i]]++] = i;
    return o;
}

/* the same stable merge sort, by a double key per index, compared inline (the hot sorts) */
static void ksort_rec(i64 *v, i64 *tmp, i64 n, const double *key) {
    if (n < 2) return;
    if (n <= 16) {
        for (i64 i = 1; i < n; i++) {
            i64 x = v[i], j = i - 1;
            double kx = key[x];
            while (j >= 0 && key[v[j]] > kx) { v[j + 1] = v[j]; j--; }
            v[j + 1] = x;
        }
        return;
    }
    i64 h = n / 2;
    ksort_rec(v, tmp, h, key);
    ksort_rec(v + h, tmp, n - h, key);
    if (key[v[h - 1]] <= key[v[h]]) return;
    memcpy(tmp, v, sizeof(i64) * (size_t)h);
    i64 i = 0, j = h, k = 0;
    while (i < h && j < n) v[k++] = (key[v[j]] < key[tmp[i]]) ? v[j++] : tmp[i++];
    while (i < h) v[k++] = tmp[i++];
}
static void ksort(Arena *A, i64 *v, i64 n, const double *key, i64 *tmp) {
    if (n < 2) return;
    if (!tmp) tmp = NEWI(A, n / 2 + 1);
    ksort_rec(v, tmp, n, key);
}

static int cmp_i(i64 a, i64 b, const void *ctx) {
    const i64 *k = (const i64 *)ctx;
    return (k[a] < k[b]) ? -1 : (k[a] > k[b]) ? 1 : 0;
}
static i64 *argsort_d(Arena *A, const double *key, i64 n) {
    i64 *o = NEWI(A, n);
    for (i64 i = 0; i < n; i++) o[i] = i;
    ksort(A, o, n, key, NULL);
    return o;
}

/* ---------------------------------------------------------------- binary heap of (prio, id) */
typedef struct { i64 *p; i64 *id; i64 n; } Heap;
static int hless(const Heap *h, i64 a, i64 b) {
    return h->p[a] < h->p[b] || (h->p[a] == h->p[b] && h->id[a] < h->id[b]);
}
static void hswap(Heap *h, i64 a, i64 b) {
    i64 t = h->p[a]; h->p[a] = h->p[b]; h->p[b] = t;
    t = h->id[a]; h->id[a] = h->id[b]; h->id[b] = t;
}
static void hpush(Heap *h, i64 prio, i64 id) {
    i64 i = h->n++;
    h->p[i] = prio; h->id[i] = id;
    while (i > 0) {
        i64 par = (i - 1) / 2;
        if (!hless(h, i, par)) break;
        hswap(h, i, par);
        i = par;
    }
}
static i64 hpop(Heap *h) {
    i64 top = h->id[0];
    h->n--;
    if (h->n > 0) {
        h->p[0] = h->p[h->n]; h->id[0] = h->id[h->n];
        i64 i = 0;
        for (;;) {
            i64 l = 2 * i + 1, r = l + 1, s = i;
            if (l < h->n && hless(h, l, s)) s = l;
            if (r < h->n && hless(h, r, s)) s = r;
            if (s == i) break;
            hswap(h, i, s);
            i = s;
        }
    }
    return top;
}

/* CSR of a -> b (targets in the order of the edge list, as a stable argsort) */
static void csr(Arena *A, i64 n, const i64 *a, const i64 *b, i64 E, i64 **ptr_out, i64 **nb_out) {
    i64 *ptr = zeros_i(A, n + 1), *nb = NEWI(A, E), *fill;
    for (i64 e = 0; e < E; e++) ptr[a[e] + 1]++;
    for (i64 i = 0; i < n; i++) ptr[i + 1] += ptr[i];
    fill = copy_i(A, ptr, n);
    for (i64 e = 0; e < E; e++) nb[fill[a[e]]++] = b[e];
    *ptr_out = ptr; *nb_out = nb;
}

/* ---------------------------------------------------------------- ranking */
/* position of each element in a topological order preferring low prio; on cycles the
 * lowest-prio remaining element is taken anyway (`_order_breaking_cycles`) */
static i64 *order_breaking_cycles(Arena *A, i64 m, const i64 *a, const i64 *b, i64 E, const i64 *prio) {
    i64 *pos = NEWI(A, m);
    int acyclic = 1;
    for (i64 e = 0; e < E; e++) if (!(prio[a[e]] < prio[b[e]])) { acyclic = 0; break; }
    i64 *by_prio = NEWI(A, m);
    for (i64 i = 0; i < m; i++) by_prio[i] = i;
    msort(A, by_prio, m, cmp_i, prio);
    if (E == 0 || acyclic) {
        for (i64 i = 0; i < m; i++) pos[by_prio[i]] = i;
        return pos;
    }
    i64 *ip, *tg;
    csr(A, m, a, b, E, &ip, &tg);
    i64 *indeg = zeros_i(A, m);
    for (i64 e = 0; e < E; e++) indeg[b[e]]++;
    char *done = zeros_c(A, m);
    Heap h = {NEWI(A, m + E + 1), NEWI(A, m + E + 1), 0};
    for (i64 i = 0; i < m; i++) if (indeg[i] == 0) hpush(&h, prio[i], i);
    i64 k = 0, cursor = 0;
    while (k < m) {
        i64 v;
        if (h.n) {
            v = hpop(&h);
            if (done[v]) continue;
        } else {
            while (done[by_prio[cursor]]) cursor++;
            v = by_prio[cursor];
        }
        done[v] = 1;
        pos[v] = k++;
        for (i64 j = ip[v]; j < ip[v + 1]; j++) {
            i64 w = tg[j];
            indeg[w]--;
            if (indeg[w] == 0 && !done[w]) hpush(&h, prio[w], w);
        }
    }
    return pos;
}

typedef struct { i64 *rank, *a, *b, *vpos; } Ranking;

static Ranking ranks(Arena *A, i64 m, const i64 *es, const i64 *ed, i64 E, const i64 *vpos0, int pull_all) {
    Ranking R;
    i64 *vpos = order_breaking_cycles(A, m, es, ed, E, vpos0);
    i64 *a = NEWI(A, E), *b = NEWI(A, E);
    for (i64 e = 0; e < E; e++) {
        int fwd = vpos[es[e]] < vpos[ed[e]];
        a[e] = fwd ? es[e] : ed[e];
        b[e] = fwd ? ed[e] : es[e];
    }
    /* longest path: edges by their target's position (stable) */
    i64 *key = NEWI(A, E);
    for (i64 e = 0; e < E; e++) key[e] = vpos[b[e]];
    i64 *o = argsort_count(A, key, E, m);
    i64 *rank = zeros_i(A, m);
    for (i64 j = 0; j < E; j++) {
        i64 s = a[o[j]], d = b[o[j]], r = rank[s] + 1;
        if (r > rank[d]) rank[d] = r;
    }
    /* pull down next to consumers: edges by their source's position, latest first */
    for (i64 e = 0; e < E; e++) key[e] = m - 1 - vpos[a[e]];
    o = argsort_count(A, key, E, m);
    i64 *latest = copy_i(A, rank, m), *limit = zeros_i(A, m);
    char *movable = NEWC(A, m);
    if (pull_all) memset(movable, 1, (size_t)m);
    else {
        i64 *outd = zeros_i(A, m), *ind = zeros_i(A, m);
        for (i64 e = 0; e < E; e++) { outd[a[e]]++; ind[b[e]]++; }
        for (i64 i = 0; i < m; i++) movable[i] = outd[i] >= ind[i];
    }
    i64 cur = -1;
    for (i64 j = 0; j < E; j++) {
        i64 s = a[o[j]], d = b[o[j]];
        if (s != cur) {
            if (cur >= 0 && movable[cur] && limit[cur] - 1 > latest[cur]) latest[cur] = limit[cur] - 1;
            cur = s;
            limit[s] = latest[d];
        } else if (latest[d] < limit[s]) {
            limit[s] = latest[d];
        }
    }
    if (cur >= 0 && movable[cur] && limit[cur] - 1 > latest[cur]) latest[cur] = limit[cur] - 1;
    R.rank = latest; R.a = a; R.b = b; R.vpos = vpos;
    return R;
}

/* ---------------------------------------------------------------- crossings */
/* Segments grouped by rank gap once per ranking (gap g: segments from rank g to g + 1), with
 * scratch space, so counting the crossings of one gap allocates nothing. */
typedef struct {
    i64 n_r, S;
    const i64 *counts, *ss, *sd;
    i64 *gstart, *seg, *tmp, *seq, *cnt, *bit;
} Gaps;

static Gaps gap_index(Arena *A, const i64 *R, const i64 *ss, const i64 *sd, i64 S, i64 n_r,
                      const i64 *counts) {
    Gaps G;
    G.n_r = n_r; G.S = S; G.counts = counts; G.ss = ss; G.sd = sd;
    i64 *g = NEWI(A, S > 0 ? S : 1);
    for (i64 s = 0; s < S; s++) g[s] = R[ss[s]];
    G.seg = argsort_count(A, g, S, n_r);
    G.gstart = zeros_i(A, n_r + 1);
    for (i64 s = 0; s < S; s++) G.gstart[g[s] + 1]++;
    for (i64 r = 0; r < n_r; r++) G.gstart[r + 1] += G.gstart[r];
    i64 maxc = 0;
    for (i64 r = 0; r < n_r; r++) if (counts[r] > maxc) maxc = counts[r];
    G.tmp = NEWI(A, S > 0 ? S : 1);
    G.seq = NEWI(A, S > 0 ? S : 1);
    G.cnt = NEWI(A, maxc + 2);
    G.bit = NEWI(A, maxc + 2);
    return G;
}

/* crossings of gap g, strict: pairs whose upper and lower ends are in opposite orders
 * (segments sorted by upper then lower position, inversions of the lower position) */
static i64 count_gap(Gaps *G, i64 g, const i64 *pos) {
    i64 i = G->gstart[g], j = G->gstart[g + 1], len = j - i;
    if (len < 2) return 0;
    const i64 *ss = G->ss, *sd = G->sd, *seg = G->seg;
    i64 *cnt = G->cnt, *tmp = G->tmp, *seq = G->seq, *bit = G->bit;
    if (len <= 16) {  /* few segments: compare every pair */
        i64 c = 0;
        for (i64 a = i; a < j; a++) {
            i64 ua = pos[ss[seg[a]]], la = pos[sd[seg[a]]];
            for (i64 b = a + 1; b < j; b++) {
                i64 du = ua - pos[ss[seg[b]]], dl = la - pos[sd[seg[b]]];
                c += du * dl < 0;
            }
        }
        return c;
    }
    i64 cu = G->counts[g], cl = G->counts[g + 1];
    memset(cnt, 0, sizeof(i64) * (size_t)(cl + 1));
    for (i64 t = i; t < j; t++) cnt[pos[sd[seg[t]]] + 1]++;
    for (i64 r = 0; r < cl; r++) cnt[r + 1] += cnt[r];
    for (i64 t = i; t < j; t++) { i64 s = seg[t]; tmp[cnt[pos[sd[s]]]++] = s; }
    memset(cnt, 0, sizeof(i64) * (size_t)(cu + 1));
    for (i64 t = 0; t < len; t++) cnt[pos[ss[tmp[t]]] + 1]++;
    for (i64 r = 0; r < cu; r++) cnt[r + 1] += cnt[r];
    for (i64 t = 0; t < len; t++) { i64 s = tmp[t]; seq[cnt[pos[ss[s]]]++] = s; }
    memset(bit, 0, sizeof(i64) * (size_t)(cl + 1));
    i64 c = 0;
    for (i64 t = 0; t < len; t++) {
        i64 q = pos[sd[seq[t]]] + 1, le = 0;
        for (i64 x = q; x > 0; x -= x & -x) le += bit[x];
        c += t - le;  /* earlier segments ending further right below */
        for (i64 x = q; x <= cl; x += x & -x) bit[x]++;
    }
    return c;
}

/* crossings of every gap */
static i64 gap_crossings(Gaps *G, const i64 *pos) {
    i64 total = 0;
    for (i64 g = 0; g + 1 < G->n_r; g++) total += count_gap(G, g, pos);
    return total;
}

/* ---------------------------------------------------------------- orders of ranks */
typedef struct {  /* neighbours above and below each element */
    i64 *up_ptr, *up_nb, *dn_ptr, *dn_nb;
    i64 *span3, *both;  /* both sides in one list: element v's above at both[span3[3v]..span3[3v+1]),
                           below at both[span3[3v+1]..span3[3v+2]) (transpose's hot loop) */
} Adj;

typedef struct {
    i64 m, n, S, n_ranks, best, nbend;
    int full;
    i64 *r, *R, *k, *ss, *sd, *starts, *counts, *order, *bend_idx;
    double *W, *prio;
    Gaps G;
    Adj adj;
} Lay;


static Adj adjacency(Arena *A, i64 n, const i64 *ss, const i64 *sd, i64 S) {
    Adj j;
    csr(A, n, sd, ss, S, &j.up_ptr, &j.up_nb);
    csr(A, n, ss, sd, S, &j.dn_ptr, &j.dn_nb);
    j.span3 = NEWI(A, 3 * n + 1);
    j.both = NEWI(A, 2 * S + 1);
    for (i64 v = 0, k = 0; v < n; v++) {
        j.span3[3 * v] = k;
        for (i64 x = j.up_ptr[v]; x < j.up_ptr[v + 1]; x++) j.both[k++] = j.up_nb[x];
        j.span3[3 * v + 1] = k;
        for (i64 x = j.dn_ptr[v]; x < j.dn_ptr[v + 1]; x++) j.both[k++] = j.dn_nb[x];
        j.span3[3 * v + 2] = k;
    }
    return j;
}

/* dot's transpose (vectorised in Python: one batch of disjoint pairs at a time) */
static i64 transpose(Arena *A, i64 *order, i64 *pos, const i64 *starts, const i64 *counts, i64 n,
                     i64 n_r, i64 best, int rounds, const Adj *adj, int ties, const i64 *gaps,
                     i64 n_gaps, i64 *gap_now) {
    char *busy = NULL;
    if (gaps) {  /* only ranks beside a gap with crossings (or beside a rank swapped since) */
        i64 busy_n = (n_r > n_gaps + 1 ? n_r : n_gaps + 1) + 1;
        busy = zeros_c(A, busy_n);
        for (i64 g = 0; g < n_gaps; g++) if (gaps[g] > 0) { busy[g] = 1; busy[g + 1] = 1; }
    }
    /* a round tries the left slots of one batch: slot parity within its rank q, rank parity rp */
    i64 *cand = NEWI(A, n / 2 + 2), *crank = NEWI(A, n / 2 + 2), *gain = NEWI(A, n / 2 + 2);
    i64 *gain_up = NEWI(A, n / 2 + 2);
    char *ok = NEWC(A, n / 2 + 2);
    /* round of each rank's last change and of the last try of its pairs of each slot parity: a
     * rank tried after its last change and its neighbours' has no pair to swap (a pair to swap
     * would have changed it), so trying it again gives nothing (the same result, faster) */
    i64 *changed = zeros_i(A, n_r + 2), *tried = zeros_i(A, 2 * n_r + 2);
    int idle = 0;
    for (int rnd = 0; rnd < rounds * 4; rnd++) {
        int bi = rnd % 4;
        i64 q = bi % 2, nc = 0;
        i64 now_round = rnd + 1;
        for (i64 r = bi / 2; r < n_r; r += 2) {
            if (busy && !busy[r]) continue;
            i64 last = changed[r + 1];
            if (r > 0 && changed[r] > last) last = changed[r];
            if (changed[r + 2] > last) last = changed[r + 2];  /* changed[] is shifted by one */
            if (tried[2 * r + q] > last) continue;
            /* no crossing in the gaps above and below: no pair of the rank crosses, so none
             * gains or ties (the same result, not tried) */
            if (gap_now && (r == 0 || gap_now[r - 1] == 0) && (r + 1 >= n_r || gap_now[r] == 0))
                continue;
            tried[2 * r + q] = now_round;
            i64 end = starts[r] + counts[r];
            for (i64 i = starts[r] + q; i + 1 < end; i += 2) { cand[nc] = i; crank[nc++] = r; }
        }
        if (nc == 0) {
            idle++;
            if (idle >= 4) break;
            continue;
        }
        int any = 0;
        for (i64 t = 0; t < nc; t++) {
            i64 left = cand[t], u = order[left], v = order[left + 1];
            const i64 *su = adj->span3 + 3 * u, *sv = adj->span3 + 3 * v, *nb = adj->both;
            i64 du = su[2] - su[0], dv = sv[2] - sv[0];
            i64 g = 0, now = 0, g_up = 0;
            if (du * dv <= 8192) {
                for (int side = 0; side < 2; side++) {
                    for (i64 x = su[side]; x < su[side + 1]; x++) {
                        i64 p = pos[nb[x]];
                        for (i64 y = sv[side]; y < sv[side + 1]; y++) {  /* branch-free */
                            i64 q = pos[nb[y]], gt = p > q;
                            g += gt - (p < q);
                            now += gt;
                        }
                    }
                    if (side == 0) g_up = g;
                }
            }
            gain[t] = g;
            gain_up[t] = g_up;
            ok[t] = g > 0;
            if (g > 0) any = 1;
            if (ties && g == 0 && now > 0) ok[t] = 2;
        }
        if (any) idle = 0;
        else {
            idle++;
            if (idle >= 4) break;
            if (!ties) continue;
        }
        for (i64 t = 0; t < nc; t++) {
            if (!ok[t] || (!ties && ok[t] == 2)) continue;
            i64 left = cand[t], a = order[left], b = order[left + 1];
            if (busy) {
                i64 sr = crank[t];
                busy[sr] = 1; busy[sr + 1] = 1; busy[sr > 0 ? sr - 1 : 0] = 1;
            }
            order[left] = b; order[left + 1] = a;
            changed[crank[t] + 1] = now_round;
            if (gap_now) {  /* the crossings of the gaps above and below change by the gains */
                i64 r = crank[t];
                if (r > 0) gap_now[r - 1] -= gain_up[t];
                if (r + 1 < n_r) gap_now[r] -= gain[t] - gain_up[t];
            }
            pos[a] += 1; pos[b] -= 1;
            best -= gain[t];
        }
    }
    return best;
}

/* ---------------------------------------------------------------- mincross */
static void bfs_order(Arena *A, i64 n, const i64 *R, const i64 *starts, i64 n_r, const i64 *by_prio,
                      const i64 *fptr, const i64 *nptr, const i64 *nnb, i64 *flat) {
    char *mark = zeros_c(A, n);
    i64 *fill = copy_i(A, starts, n_r), *q = NEWI(A, n);
    for (i64 t = 0; t < n; t++) {
        i64 v = by_prio[t];
        if (fptr[v + 1] > fptr[v] || mark[v]) continue;
        mark[v] = 1;
        i64 head = 0, tail = 0;
        q[tail++] = v;
        while (head < tail) {
            i64 u = q[head++];
            flat[fill[R[u]]++] = u;
            for (i64 x = nptr[u]; x < nptr[u + 1]; x++) {
                i64 w = nnb[x];
                if (!mark[w]) { mark[w] = 1; q[tail++] = w; }
            }
        }
    }
    for (i64 t = 0; t < n; t++) {
        i64 v = by_prio[t];
        if (!mark[v]) flat[fill[R[v]]++] = v;
    }
}

static int cmp_int64(const void *x, const void *y) {
    i64 a = *(const i64 *)x, b = *(const i64 *)y;
    return (a > b) - (a < b);
}

/* one weighted-median sweep over the ranks of seq (`_median_step`) */
static void median_step(Arena *A, i64 *flat, i64 *p, const i64 *starts, const i64 *counts,
                        const i64 *ptr, const i64 *nb, const i64 *seq, i64 nseq, int reverse,
                        double *mv, i64 *slots, i64 *moved, i64 *layer, i64 *qbuf, char *dirty,
                        i64 *sortbuf) {
    for (i64 si = 0; si < nseq; si++) {
        i64 r = seq[si], st = starts[r], c = counts[r];
        int fixed = 0;
        for (i64 j = 0; j < c; j++) {
            i64 v = flat[st + j], d = ptr[v + 1] - ptr[v];
            const i64 *ns = nb + ptr[v];
            if (d == 1) mv[j] = (double)p[ns[0]];
            else if (d == 2) mv[j] = (double)(p[ns[0]] + p[ns[1]]) * 0.5;
            else if (d == 0) { mv[j] = -1.0; fixed = 1; }
            else {
                for (i64 x = 0; x < d; x++) qbuf[x] = p[ns[x]];
                qsort(qbuf, (size_t)d, sizeof(i64), cmp_int64);
                i64 h = d / 2;
                if (d % 2) mv[j] = (double)qbuf[h];
                else {
                    i64 wl = qbuf[h - 1] - qbuf[0], wr = qbuf[d - 1] - qbuf[h];
                    if (wl != wr) mv[j] = (double)(qbuf[h - 1] * wr + qbuf[h] * wl) / (double)(wl + wr);
                    else mv[j] = (double)(qbuf[h - 1] + qbuf[h]) * 0.5;
                }
            }
        }
        i64 ns_ = 0;
        for (i64 j = 0; j < c; j++) if (!fixed || mv[j] >= 0) slots[ns_++] = j;
        for (i64 t = 0; t < ns_; t++) moved[t] = reverse ? slots[ns_ - 1 - t] : slots[t];
        ksort(A, moved, ns_, mv, sortbuf);
        int same = 1;
        for (i64 t = 0; t < ns_; t++) if (moved[t] != slots[t]) { same = 0; break; }
        if (same) continue;
        dirty[r] = 1;
        memcpy(layer, flat + st, sizeof(i64) * (size_t)c);
        for (i64 t = 0; t < ns_; t++) {
            i64 v = layer[moved[t]];
            flat[st + slots[t]] = v;
            p[v] = slots[t];
        }
    }
}

typedef struct {
    Arena *A;
    i64 n, n_r;
    const i64 *starts, *counts;
    Adj adj;
    Gaps G;
    i64 *gaps;   /* crossings per gap, kept up to date for the ranks not marked dirty */
    char *dirty; /* ranks whose order changed since their gaps were counted */
    i64 *gaps_before;
    i64 total;
    int rounds;
} Ctx;

static void positions(const Ctx *C, const i64 *flat, i64 *p) {
    for (i64 r = 0; r < C->n_r; r++)
        for (i64 j = 0; j < C->counts[r]; j++) p[flat[C->starts[r] + j]] = j;
}

/* crossings (the gaps beside changed ranks recounted), then transpositions when there are
 * any (`settle`) */
static i64 settle(Ctx *C, i64 *flat, i64 *p, int ties) {
    for (i64 g = 0; g + 1 < C->n_r; g++) {
        if (!C->dirty[g] && !C->dirty[g + 1]) continue;
        i64 c = count_gap(&C->G, g, p);
        C->total += c - C->gaps[g];
        C->gaps[g] = c;
    }
    memset(C->dirty, 0, (size_t)C->n_r);
    if (C->total == 0) return 0;
    /* the gaps' counts are kept up to date through the swaps (busy ranks come from the counts
     * before them, as in the reference) */
    i64 *before = C->gaps_before;
    memcpy(before, C->gaps, sizeof(i64) * (size_t)C->n_r);
    C->total = transpose(C->A, flat, p, C->starts, C->counts, C->n, C->n_r, C->total, C->rounds,
                         &C->adj, ties, before, C->n_r, C->gaps);
    return C->total;
}

static void all_dirty(Ctx *C) { if (C->n_r > 0) memset(C->dirty, 1, (size_t)C->n_r); }

static i64 mincross(Arena *A, i64 *order, const i64 *R, const i64 *starts, const i64 *counts, i64 n_r,
                    i64 n, const double *prio, i64 best,
                    int max_iter, int min_quit, const int *tries, int ntries, int start_iters,
                    int rounds, int flip, Gaps *G, const Adj *adj) {
    Ctx C = {A, n, n_r, starts, counts, *adj, *G,
             zeros_i(A, n_r + 1), NEWC(A, n_r + 1), NEWI(A, n_r + 1), 0, rounds};
    all_dirty(&C);
    i64 *seq_dn = NEWI(A, n_r), *seq_up = NEWI(A, n_r), ndn = 0, nup = 0;
    for (i64 r = 1; r < n_r; r++) if (counts[r] > 1) seq_dn[ndn++] = r;
    for (i64 r = n_r - 2; r >= 0; r--) if (counts[r] > 1) seq_up[nup++] = r;
    i64 *by_prio = argsort_d(A, prio, n);
    i64 *best_flat = copy_i(A, order, n), best_c = best;
    i64 *flat = NEWI(A, n), *p = NEWI(A, n);
    i64 maxc = 1, maxd = 1;
    for (i64 r = 0; r < n_r; r++) if (counts[r] > maxc) maxc = counts[r];
    for (i64 v = 0; v < n; v++) {
        i64 d1 = C.adj.up_ptr[v + 1] - C.adj.up_ptr[v], d2 = C.adj.dn_ptr[v + 1] - C.adj.dn_ptr[v];
        if (d1 > maxd) maxd = d1;
        if (d2 > maxd) maxd = d2;
    }
    double *mv = NEWD(A, maxc);
    i64 *slots = NEWI(A, maxc), *moved = NEWI(A, maxc), *layer = NEWI(A, maxc), *qbuf = NEWI(A, maxd);
    i64 *sortbuf = NEWI(A, maxc / 2 + 2);
    for (int stage = 0; stage <= ntries; stage++) {
        i64 cur;
        int iters;
        if (stage < ntries) {
            int t = tries[stage];
            if (t == 0) memcpy(flat, order, sizeof(i64) * (size_t)n);
            else if (t == 1) bfs_order(A, n, R, starts, n_r, by_prio, C.adj.up_ptr, C.adj.dn_ptr, C.adj.dn_nb, flat);
            else bfs_order(A, n, R, starts, n_r, by_prio, C.adj.dn_ptr, C.adj.up_ptr, C.adj.up_nb, flat);
            positions(&C, flat, p);
            all_dirty(&C);
            cur = settle(&C, flat, p, 0);
            if (cur <= best_c) { memcpy(best_flat, flat, sizeof(i64) * (size_t)n); best_c = cur; }
            iters = start_iters;
        } else {
            memcpy(flat, best_flat, sizeof(i64) * (size_t)n);
            positions(&C, flat, p);
            all_dirty(&C);
            cur = best_c;
            iters = max_iter;
        }
        int trying = 0;
        for (int it = 0; it < iters; it++) {
            if (trying >= min_quit || cur == 0) break;
            trying++;
            int reverse = flip && (it % 4 < 2);
            int down = it % 2 == 0;
            if (down) median_step(A, flat, p, starts, counts, C.adj.up_ptr, C.adj.up_nb, seq_dn, ndn, reverse, mv, slots, moved, layer, qbuf, C.dirty, sortbuf);
            else median_step(A, flat, p, starts, counts, C.adj.dn_ptr, C.adj.dn_nb, seq_up, nup, reverse, mv, slots, moved, layer, qbuf, C.dirty, sortbuf);
            cur = settle(&C, flat, p, flip && !reverse);
            if (cur <= best_c) {
                if ((double)cur < 0.995 * (double)best_c) trying = 0;
                memcpy(best_flat, flat, sizeof(i64) * (size_t)n);
                best_c = cur;
            }
        }
        if (best_c == 0) break;
    }
    memcpy(order, best_flat, sizeof(i64) * (size_t)n);
    return best_c;
}

/* ---------------------------------------------------------------- one ranking, ordered */
typedef struct { const double *key, *p; const i64 *R; } LexCtx;
static int cmp_lex(i64 a, i64 b, const void *ctx) {
    const LexCtx *L = (const LexCtx *)ctx;
    if (L->R[a] != L->R[b]) return L->R[a] < L->R[b] ? -1 : 1;
    if (L->key[a] != L->key[b]) return L->key[a] < L->key[b] ? -1 : 1;
    if (L->p && L->p[a] != L->p[b]) return L->p[a] < L->p[b] ? -1 : 1;
    return 0;
}

static void place(const Lay *L, const i64 *order, i64 *pos) {
    for (i64 i = 0; i < L->n; i++) pos[order[i]] = i - L->starts[L->R[order[i]]];
}

static Lay order_ranks(Arena *A, i64 m, const Ranking *rk, i64 E, const double *w, int sweeps,
                       const int *tries, int ntries) {
    Lay L;
    memset(&L, 0, sizeof(L));
    const i64 *r = rk->rank, *a = rk->a, *b = rk->b, *vpos = rk->vpos;
    i64 *k = NEWI(A, E), *trunk_len = zeros_i(A, m), nbend = 0;
    for (i64 e = 0; e < E; e++) {
        i64 span = r[b[e]] - r[a[e]];
        k[e] = span - 1 > 0 ? span - 1 : 0;
        if (k[e] > trunk_len[a[e]]) trunk_len[a[e]] = k[e];
        nbend += k[e];
    }
    i64 d_n = 0;
    i64 *trunk_off = NEWI(A, m);
    for (i64 i = 0; i < m; i++) { trunk_off[i] = d_n; d_n += trunk_len[i]; }
    i64 n = m + d_n;
    i64 *R = NEWI(A, n), *owner = NEWI(A, d_n > 0 ? d_n : 1);
    memcpy(R, r, sizeof(i64) * (size_t)m);
    for (i64 i = 0; i < m; i++)
        for (i64 s = 0; s < trunk_len[i]; s++) { owner[trunk_off[i] + s] = i; R[m + trunk_off[i] + s] = r[i] + 1 + s; }
    /* segments: trunk links (heads, then dummy -> next dummy), then each edge's last link */
    i64 n_heads = 0, n_links = 0;
    for (i64 i = 0; i < m; i++) if (trunk_len[i] > 0) n_heads++;
    for (i64 j = 1; j < d_n; j++) if (owner[j] == owner[j - 1]) n_links++;
    i64 S = n_heads + n_links + E;
    i64 *ss = NEWI(A, S), *sd = NEWI(A, S), s = 0;
    for (i64 i = 0; i < m; i++) if (trunk_len[i] > 0) { ss[s] = i; sd[s] = m + trunk_off[i]; s++; }
    for (i64 j = 1; j < d_n; j++) if (owner[j] == owner[j - 1]) { ss[s] = m + j - 1; sd[s] = m + j; s++; }
    for (i64 e = 0; e < E; e++) { ss[s] = k[e] > 0 ? m + trunk_off[a[e]] + k[e] - 1 : a[e]; sd[s] = b[e]; s++; }
    i64 *bend_idx = NEWI(A, nbend > 0 ? nbend : 1), t = 0;
    for (i64 e = 0; e < E; e++) for (i64 st = 0; st < k[e]; st++) bend_idx[t++] = m + trunk_off[a[e]] + st;
    double *W = NEWD(A, n), *prio = NEWD(A, n);
    for (i64 i = 0; i < m; i++) { W[i] = w[i]; prio[i] = (double)vpos[i]; }
    for (i64 j = 0; j < d_n; j++) { W[m + j] = DUMMY_WIDTH; prio[m + j] = (double)vpos[owner[j]] + 0.5; }
    i64 n_ranks = 0;
    for (i64 i = 0; i < n; i++) if (R[i] + 1 > n_ranks) n_ranks = R[i] + 1;
    i64 *counts = zeros_i(A, n_ranks), *starts = NEWI(A, n_ranks);
    for (i64 i = 0; i < n; i++) counts[R[i]]++;
    for (i64 q = 0, c = 0; q < n_ranks; q++) { starts[q] = c; c += counts[q]; }
    L.m = m; L.n = n; L.S = S; L.n_ranks = n_ranks; L.nbend = nbend;
    L.r = (i64 *)r; L.R = R; L.k = k; L.ss = ss; L.sd = sd; L.starts = starts; L.counts = counts;
    L.bend_idx = bend_idx; L.W = W; L.prio = prio;

    i64 *pos = NEWI(A, n), *order = NEWI(A, n);
    for (i64 i = 0; i < n; i++) order[i] = i;
    LexCtx lc = {prio, NULL, R};
    msort(A, order, n, cmp_lex, &lc);
    place(&L, order, pos);
    double *deg_in = zeros_d(A, n), *deg_out = zeros_d(A, n);
    for (i64 q = 0; q < S; q++) { deg_in[sd[q]] += 1.0; deg_out[ss[q]] += 1.0; }
    L.G = gap_index(A, R, ss, sd, S, n_ranks, counts);
    L.adj = adjacency(A, n, ss, sd, S);
    i64 best = gap_crossings(&L.G, pos);
    i64 *best_order = copy_i(A, order, n);
    int idle = 0;
    double *pd = NEWD(A, n), *key = NEWD(A, n), *acc = NEWD(A, n);
    i64 maxc = 1;
    for (i64 q = 0; q < n_ranks; q++) if (counts[q] > maxc) maxc = counts[q];
    i64 *sortbuf = NEWI(A, maxc / 2 + 2);
    for (int it = 0; it < (sweeps > 0 ? sweeps : 0) * 3; it++) {
        for (i64 i = 0; i < n; i++) pd[i] = (double)pos[i];
        memset(acc, 0, sizeof(double) * (size_t)n);
        if (it % 2 == 0) {
            for (i64 q = 0; q < S; q++) acc[sd[q]] += pd[ss[q]];
            for (i64 i = 0; i < n; i++) key[i] = deg_in[i] > 0 ? acc[i] / (deg_in[i] > 1 ? deg_in[i] : 1) : pd[i];
        } else {
            for (i64 q = 0; q < S; q++) acc[ss[q]] += pd[sd[q]];
            for (i64 i = 0; i < n; i++) key[i] = deg_out[i] > 0 ? acc[i] / (deg_out[i] > 1 ? deg_out[i] : 1) : pd[i];
        }
        /* (rank, key, position): each rank's slice is in position order, so a stable sort
         * of the slice by key is the same order */
        for (i64 q = 0; q < n_ranks; q++) ksort(A, order + starts[q], counts[q], key, sortbuf);
        place(&L, order, pos);
        i64 c = gap_crossings(&L.G, pos);
        if (c < best) { best = c; memcpy(best_order, order, sizeof(i64) * (size_t)n); idle = 0; }
        else idle++;
        if (best == 0 || idle >= 4) break;
    }
    memcpy(order, best_order, sizeof(i64) * (size_t)n);
    place(&L, order, pos);
    if (sweeps > 0 && best > 0) {
        if (n <= RANK_SWEEP_LIMIT) {
            if (n <= FULL_SWEEPS_LIMIT) {
                best = mincross(A, order, R, starts, counts, n_ranks, n, prio, best,
                                0, 8, tries, ntries, 4, 8, 1, &L.G, &L.adj);
            } else {
                static const int t0[1] = {0};
                best = mincross(A, order, R, starts, counts, n_ranks, n, prio, best,
                                0, 8, t0, 1, 2, 2, 0, &L.G, &L.adj);
            }
        } else {
            best = transpose(A, order, pos, starts, counts, n, n_ranks, best, 8, &L.adj, 0, NULL, 0,
                             NULL);
        }
    }
    L.order = order;
    L.best = best;
    L.full = sweeps > 0 && n <= FULL_SWEEPS_LIMIT;
    return L;
}

static void more_starts(Arena *A, Lay *L) {
    static const int t12[2] = {1, 2};
    if (L->full && L->best > 0)
        L->best = mincross(A, L->order, L->R, L->starts, L->counts, L->n_ranks, L->n, L->prio,
                           L->best, 0, 8, t12, 2, 4, 8, 1, &L->G, &L->adj);
}

static void refine(Arena *A, Lay *L, int sweeps) {
    static const int t0[1] = {0};
    if (L->full && L->best > 0)
        L->best = mincross(A, L->order, L->R, L->starts, L->counts, L->n_ranks, L->n, L->prio,
                           L->best, sweeps * 6, 8, t0, 1, 4, 8, 1, &L->G, &L->adj);
}

/* ---------------------------------------------------------------- the layout */
typedef struct { double *x; i64 *rank; i64 *bend_ptr; double *bend_x; i64 nbend; i64 crossings; } Out;

static Out sugiyama(Arena *A, i64 m, const i64 *es, const i64 *ed, i64 E, const i64 *vpos,
                    const double *w, int sweeps) {
    Out o;
    static const int t0[1] = {0};
    Ranking r1 = ranks(A, m, es, ed, E, vpos, 1);
    Lay lays[2];
    int nl = 1;
    lays[0] = order_ranks(A, m, &r1, E, w, sweeps, t0, 1);
    if (sweeps > 0 && lays[0].best > 0) {
        Ranking r2 = ranks(A, m, es, ed, E, vpos, 0);
        int same = 1;
        for (i64 i = 0; i < m; i++) if (r2.rank[i] != r1.rank[i]) { same = 0; break; }
        if (!same) lays[nl++] = order_ranks(A, m, &r2, E, w, sweeps, t0, 1);
    }
    i64 low = lays[0].best;
    for (int i = 1; i < nl; i++) if (lays[i].best < low) low = lays[i].best;
    int pick = -1;
    for (int i = 0; i < nl; i++) {
        if (!((double)lays[i].best <= RACE_MARGIN * (double)low)) { lays[i].best = -1; continue; }
        more_starts(A, &lays[i]);
        if (pick < 0 || lays[i].best < lays[pick].best) pick = i;
    }
    Lay *L = &lays[pick];
    refine(A, L, sweeps);
    i64 n = L->n, n_ranks = L->n_ranks, S = L->S;
    const i64 *order = L->order, *R = L->R, *starts = L->starts, *counts = L->counts;
    const i64 *ss = L->ss, *sd = L->sd;
    const double *W = L->W;
    /* coordinates */
    i64 *ro = NEWI(A, n);
    double *cum = NEWD(A, n), *c = NEWD(A, n), *xs = NEWD(A, n);
    for (i64 i = 0; i < n; i++) ro[i] = R[order[i]];
    double run = 0.0;
    for (i64 i = 0; i < n; i++) {
        double sep = (i > 0 && ro[i] == ro[i - 1]) ? (W[order[i]] + W[order[i - 1]]) / 2.0 + GAP : 0.0;
        run += sep;
        cum[i] = run;
    }
    for (i64 i = 0; i < n; i++) c[i] = cum[i] - cum[starts[ro[i]]];
    for (i64 i = 0; i < n; i++) {
        i64 end = starts[ro[i]] + counts[ro[i]] - 1;
        if (end > n - 1) end = n - 1;
        xs[order[i]] = c[i] - c[end] / 2.0;
    }
    double *wseg = NEWD(A, S > 0 ? S : 1), *wa = zeros_d(A, n), *wb = zeros_d(A, n), *wdeg = NEWD(A, n);
    for (i64 q = 0; q < S; q++) {
        int ds = ss[q] >= L->m, dd = sd[q] >= L->m;
        wseg[q] = (ds && dd) ? 8.0 : ((ds || dd) ? 2.0 : 1.0);
        wa[ss[q]] += wseg[q];
        wb[sd[q]] += wseg[q];
    }
    for (i64 i = 0; i < n; i++) wdeg[i] = wa[i] + wb[i];
    double *c_rev = NEWD(A, n), *want = NEWD(A, n), *left = NEWD(A, n), *right = NEWD(A, n);
    double *ta = NEWD(A, n), *tb = NEWD(A, n);
    for (i64 j = 0; j < n; j++) {
        i64 i = n - 1 - j, end = starts[ro[i]] + counts[ro[i]] - 1;
        if (end > n - 1) end = n - 1;
        c_rev[j] = c[end] - c[i];
    }
    for (int it = 0; it < 8; it++) {
        memset(ta, 0, sizeof(double) * (size_t)n);
        memset(tb, 0, sizeof(double) * (size_t)n);
        for (i64 q = 0; q < S; q++) {
            ta[ss[q]] += wseg[q] * xs[sd[q]];
            tb[sd[q]] += wseg[q] * xs[ss[q]];
        }
        double amax = 0.0;
        for (i64 i = 0; i < n; i++) {
            i64 v = order[i];
            double tot = ta[v] + tb[v];
            want[i] = wdeg[v] > 0 ? tot / (wdeg[v] > 1e-9 ? wdeg[v] : 1e-9) : xs[v];
            double aw = want[i] < 0 ? -want[i] : want[i];
            if (i == 0 || aw > amax) amax = aw;
        }
        double span_x = amax + cum[n - 1] + 1;
        double big = 4.0 * span_x;
        double mx = 0.0;
        for (i64 i = 0; i < n; i++) {
            double off = (double)ro[i] * big;
            double t = want[i] - c[i] + off;
            if (i == 0 || t > mx) mx = t;
            left[i] = mx - off + c[i];
        }
        mx = 0.0;
        for (i64 j = 0; j < n; j++) {
            i64 i = n - 1 - j;
            double offr = (double)(n_ranks - 1 - ro[i]) * big;
            double t = -want[i] - c_rev[j] + offr;
            if (j == 0 || t > mx) mx = t;
            right[i] = -(mx - offr + c_rev[j]);
        }
        for (i64 i = 0; i < n; i++) xs[order[i]] = (left[i] + right[i]) / 2.0;
    }
    o.x = NEWD(A, m);
    for (i64 i = 0; i < m; i++) o.x[i] = xs[i];
    o.rank = L->r;
    o.bend_ptr = NEWI(A, E + 1);
    o.bend_ptr[0] = 0;
    for (i64 e = 0; e < E; e++) o.bend_ptr[e + 1] = o.bend_ptr[e] + L->k[e];
    o.nbend = L->nbend;
    o.bend_x = NEWD(A, L->nbend > 0 ? L->nbend : 1);
    for (i64 t = 0; t < L->nbend; t++) o.bend_x[t] = xs[L->bend_idx[t]];
    o.crossings = L->best;
    return o;
}

/* ---------------------------------------------------------------- Python binding */
static PyObject *py_sugiyama(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t m;
    Py_buffer bes, bed, bvp, bw;
    int sweeps;
    if (!PyArg_ParseTuple(args, "ny*y*y*y*i", &m, &bes, &bed, &bvp, &bw, &sweeps)) return NULL;
    PyObject *res = NULL;
    i64 E = (i64)(bes.len / (Py_ssize_t)sizeof(i64));
    if (m <= 0 || bed.len != bes.len || bvp.len != m * (Py_ssize_t)sizeof(i64) ||
        bw.len != m * (Py_ssize_t)sizeof(double) || bes.len % (Py_ssize_t)sizeof(i64)) {
        PyErr_SetString(PyExc_ValueError, "sugiyama: m > 0, es/ed int64[E], vpos int64[m], width float64[m]");
        goto done;
    }
    {
        const i64 *es = (const i64 *)bes.buf, *ed = (const i64 *)bed.buf;
        for (i64 e = 0; e < E; e++)
            if (es[e] < 0 || es[e] >= m || ed[e] < 0 || ed[e] >= m || es[e] == ed[e]) {
                PyErr_SetString(PyExc_ValueError, "sugiyama: an edge end is out of range or a self-loop");
                goto done;
            }
    }
    {
        Arena A;
        A.head = NULL;
        Out o;
        volatile int failed = 0;
        Py_BEGIN_ALLOW_THREADS
        if (setjmp(A.fail)) failed = 1;
        else o = sugiyama(&A, (i64)m, (const i64 *)bes.buf, (const i64 *)bed.buf, E,
                          (const i64 *)bvp.buf, (const double *)bw.buf, sweeps);
        Py_END_ALLOW_THREADS
        if (failed) {
            afree_all(&A);
            PyErr_NoMemory();
            goto done;
        }
        res = Py_BuildValue("(y#y#y#y#L)", (const char *)o.x, (Py_ssize_t)(sizeof(double) * (size_t)m),
                            (const char *)o.rank, (Py_ssize_t)(sizeof(i64) * (size_t)m),
                            (const char *)o.bend_ptr, (Py_ssize_t)(sizeof(i64) * (size_t)(E + 1)),
                            (const char *)o.bend_x, (Py_ssize_t)(sizeof(double) * (size_t)o.nbend),
                            (long long)o.crossings);
        afree_all(&A);
    }
done:
    PyBuffer_Release(&bes);
    PyBuffer_Release(&bed);
    PyBuffer_Release(&bvp);
    PyBuffer_Release(&bw);
    return res;
}

static PyMethodDef methods[] = {
    {"sugiyama", py_sugiyama, METH_VARARGS,
     "sugiyama(m, es, ed, vpos, width, sweeps) -> (x, rank, bend_ptr, bend_x, crossings) as bytes"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_layout",
                                    "The graph view's layered layout, compiled.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__layout(void) { return PyModule_Create(&module); }
