/*
 * callbacks: indirect calls through function pointers.
 *
 * qsort with several comparators, bsearch, a table of event handlers indexed by event
 * type, a linked-list visitor taking a callback, and an atexit hook. Exercises CALL r/m
 * (TIP packets) into many different targets and returns from them.
 *
 * Input (stdin, optional): "records rounds seed", e.g. "300 2 7".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct rec {
    int id;
    int score;
    char name[12];
};

static int by_score(const void *a, const void *b)
{
    const struct rec *x = a, *y = b;
    return (x->score > y->score) - (x->score < y->score);
}

static int by_name(const void *a, const void *b)
{
    const struct rec *x = a, *y = b;
    return strcmp(x->name, y->name);
}

/* Descending score, then ascending id: a two-key order. */
static int by_score_desc_id(const void *a, const void *b)
{
    const struct rec *x = a, *y = b;
    if (x->score != y->score)
        return x->score < y->score ? 1 : -1;
    return x->id - y->id;
}

static int by_id(const void *a, const void *b)
{
    return ((const struct rec *)a)->id - ((const struct rec *)b)->id;
}

static unsigned state;
static unsigned next_rand(void)
{
    state = state * 1664525u + 1013904223u;
    return state >> 9;
}

/* Events: a dispatch table of handlers. */
struct tally {
    long sum, count, max, evens;
};
typedef void (*handler)(struct tally *, int);
static void on_add(struct tally *t, int v) { t->sum += v; }
static void on_sub(struct tally *t, int v) { t->sum -= v; }
static void on_count(struct tally *t, int v) { t->count += v & 1; }
static void on_max(struct tally *t, int v)
{
    if (v > t->max)
        t->max = v;
}
static void on_even(struct tally *t, int v) { t->evens += !(v & 1); }
static void on_mix(struct tally *t, int v) { t->sum ^= (long)v << (v & 7); }
static const handler handlers[] = {on_add, on_sub, on_count, on_max, on_even, on_mix};

/* A list walked by a visitor. */
struct item {
    int value;
    struct item *next;
};
static void visit(const struct item *it, void (*fn)(const struct item *, void *), void *ctx)
{
    for (; it; it = it->next)
        fn(it, ctx);
}
static void sum_visitor(const struct item *it, void *ctx) { *(long *)ctx += it->value; }
static void max_visitor(const struct item *it, void *ctx)
{
    if (it->value > *(long *)ctx)
        *(long *)ctx = it->value;
}

static long exit_note;
static void goodbye(void)
{
    char line[64];
    int n = snprintf(line, sizeof line, "atexit: note %ld\n", exit_note);
    write(1, line, n);
}

int main(void)
{
    char in[64];
    ssize_t got = read(0, in, sizeof in - 1);
    in[got > 0 ? got : 0] = 0;
    int n = 300, rounds = 2, seed = 7;
    sscanf(in, "%d %d %d", &n, &rounds, &seed);
    state = (unsigned)seed;
    atexit(goodbye);

    struct rec *recs = malloc(sizeof *recs * n);
    for (int i = 0; i < n; i++) {
        recs[i].id = i;
        recs[i].score = next_rand() % 1000;
        for (int j = 0; j < 8; j++)
            recs[i].name[j] = 'a' + next_rand() % 26;
        recs[i].name[8] = 0;
    }

    int (*const orders[])(const void *, const void *) = {by_score, by_name,
                                                           by_score_desc_id};
    for (int r = 0; r < rounds; r++) {
        for (unsigned k = 0; k < sizeof orders / sizeof orders[0]; k++) {
            qsort(recs, n, sizeof *recs, orders[k]);
            printf("round %d order %u: first %s/%d last %s/%d\n", r, k, recs[0].name,
                   recs[0].score, recs[n - 1].name, recs[n - 1].score);
        }
    }
    qsort(recs, n, sizeof *recs, by_id);
    int found = 0;
    for (int i = 0; i < n; i += 3) {
        struct rec key = {.id = i};
        found += bsearch(&key, recs, n, sizeof *recs, by_id) != NULL;
    }
    printf("bsearch found %d\n", found);

    struct tally t = {0};
    for (int i = 0; i < 10 * n; i++) {
        unsigned e = next_rand();
        handlers[e % (sizeof handlers / sizeof handlers[0])](&t, (int)(e >> 4) % 5000);
    }
    printf("tally: sum %ld count %ld max %ld evens %ld\n", t.sum, t.count, t.max, t.evens);

    struct item *head = NULL;
    for (int i = 0; i < n; i++) {
        struct item *it = malloc(sizeof *it);
        it->value = recs[i].score;
        it->next = head;
        head = it;
    }
    long total = 0, best = -1;
    visit(head, sum_visitor, &total);
    visit(head, max_visitor, &best);
    printf("list: total %ld best %ld\n", total, best);
    while (head) {
        struct item *nx = head->next;
        free(head);
        head = nx;
    }
    free(recs);
    exit_note = total ^ t.sum;
    fflush(stdout);
    return 0;
}
