/*
 * recursion: deep and branchy call trees.
 *
 * Naive Fibonacci, the Ackermann function, a binary search tree built and walked
 * recursively, and N-queens by backtracking. Exercises near CALL/RET pairs at many
 * depths (return compression) and data-dependent conditional branches.
 *
 * Input (stdin, optional): "fib ack_n tree_keys queens", e.g. "18 40 2000 7".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

static long ack(long m, long n)
{
    if (m == 0)
        return n + 1;
    if (n == 0)
        return ack(m - 1, 1);
    return ack(m - 1, ack(m, n - 1));
}

struct node {
    unsigned key;
    struct node *lo, *hi;
};

static struct node *insert(struct node *t, unsigned key)
{
    if (!t) {
        t = calloc(1, sizeof *t);
        t->key = key;
        return t;
    }
    if (key < t->key)
        t->lo = insert(t->lo, key);
    else if (key > t->key)
        t->hi = insert(t->hi, key);
    return t;
}

static int height(const struct node *t)
{
    if (!t)
        return 0;
    int a = height(t->lo), b = height(t->hi);
    return 1 + (a > b ? a : b);
}

/* In-order walk folding the keys into a position-sensitive checksum. */
static unsigned long fold(const struct node *t, unsigned long acc)
{
    if (!t)
        return acc;
    acc = fold(t->lo, acc);
    acc = acc * 31 + t->key;
    return fold(t->hi, acc);
}

static void release(struct node *t)
{
    if (!t)
        return;
    release(t->lo);
    release(t->hi);
    free(t);
}

static int queens(int n, int row, unsigned cols, unsigned d1, unsigned d2)
{
    if (row == n)
        return 1;
    int count = 0;
    for (int c = 0; c < n; c++) {
        unsigned a = 1u << c, b = 1u << (row + c), d = 1u << (row - c + n);
        if ((cols & a) || (d1 & b) || (d2 & d))
            continue;
        count += queens(n, row + 1, cols | a, d1 | b, d2 | d);
    }
    return count;
}

int main(void)
{
    char in[128];
    ssize_t got = read(0, in, sizeof in - 1);
    in[got > 0 ? got : 0] = 0;
    int nfib = 18, nack = 40, keys = 2000, nq = 7;
    sscanf(in, "%d %d %d %d", &nfib, &nack, &keys, &nq);

    printf("fib(%d) = %ld\n", nfib, fib(nfib));
    printf("ack(2,%d) = %ld\n", nack, ack(2, nack));

    struct node *root = NULL;
    unsigned x = 12345;
    for (int i = 0; i < keys; i++) {
        x = x * 1103515245u + 12345u;
        root = insert(root, (x >> 8) % 100000);
    }
    printf("tree: height %d, fold %lx\n", height(root), fold(root, 0));
    release(root);

    printf("queens(%d) = %d\n", nq, queens(nq, 0, 0, 0, 0));
    fflush(stdout);
    static const char done[] = "recursion done\n";
    write(1, done, sizeof done - 1);
    return 0;
}
