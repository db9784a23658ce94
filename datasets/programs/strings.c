/*
 * strings: text processing through libc string routines.
 *
 * Reads a text from stdin (a built-in paragraph when stdin is empty), then for several
 * passes: splits it into words with strtok_r, reverses and upper-cases each word, hashes
 * words with FNV-1a and djb2, counts them in a chained hash table, and prints the most
 * frequent words with padded printf formats. libc's memcpy/strlen/strchr variants and
 * REP string instructions show up here.
 *
 * Input (stdin, optional): any text up to 8 KiB.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char builtin[] =
    "The quick brown fox jumps over the lazy dog. A tracer records every branch the\n"
    "processor takes; the decoder walks the program image and replays each branch.\n"
    "Taken, not taken, taken again: the bits pile up in packets, and the packets pile\n"
    "up in buffers, and the buffers wrap around when nobody reads them in time.\n";

static unsigned fnv1a(const char *s)
{
    unsigned h = 2166136261u;
    while (*s)
        h = (h ^ (unsigned char)*s++) * 16777619u;
    return h;
}

static unsigned long djb2(const char *s)
{
    unsigned long h = 5381;
    for (; *s; s++)
        h = h * 33 + (unsigned char)*s;
    return h;
}

static void reverse(char *s)
{
    for (size_t i = 0, j = strlen(s); i + 1 < j; i++, j--) {
        char t = s[i];
        s[i] = s[j - 1];
        s[j - 1] = t;
    }
}

struct entry {
    char *word;
    int count;
    struct entry *next;
};

#define BUCKETS 64
static struct entry *table[BUCKETS];
static int distinct;

static void count_word(const char *w)
{
    struct entry **slot = &table[fnv1a(w) % BUCKETS];
    for (struct entry *e = *slot; e; e = e->next)
        if (strcmp(e->word, w) == 0) {
            e->count++;
            return;
        }
    struct entry *e = malloc(sizeof *e);
    e->word = strdup(w);
    e->count = 1;
    e->next = *slot;
    *slot = e;
    distinct++;
}

static int by_count(const void *a, const void *b)
{
    const struct entry *x = *(struct entry *const *)a, *y = *(struct entry *const *)b;
    if (x->count != y->count)
        return y->count - x->count;
    return strcmp(x->word, y->word);
}

int main(void)
{
    static char text[8192];
    size_t len = 0;
    ssize_t got;
    while (len < sizeof text - 1 && (got = read(0, text + len, sizeof text - 1 - len)) > 0)
        len += got;
    if (len == 0) {
        memcpy(text, builtin, sizeof builtin);
        len = sizeof builtin - 1;
    }
    text[len] = 0;

    static char work[8192], line[160];
    unsigned long mix = 0;
    int words = 0;
    for (int pass = 0; pass < 10; pass++) {
        memcpy(work, text, len + 1);
        char *save = NULL;
        for (char *w = strtok_r(work, " \t\n.,;:!?", &save); w;
             w = strtok_r(NULL, " \t\n.,;:!?", &save)) {
            for (char *p = w; *p; p++)
                *p = (char)tolower((unsigned char)*p);
            count_word(w);
            char rev[64];
            snprintf(rev, sizeof rev, "%s", w);
            reverse(rev);
            for (char *p = rev; *p; p++)
                *p = (char)toupper((unsigned char)*p);
            mix = mix * 7 + djb2(rev) + fnv1a(w);
            words++;
        }
    }

    struct entry **all = malloc(sizeof *all * distinct);
    int n = 0;
    for (int b = 0; b < BUCKETS; b++)
        for (struct entry *e = table[b]; e; e = e->next)
            all[n++] = e;
    qsort(all, n, sizeof *all, by_count);
    printf("%d words, %d distinct, mix %016lx\n", words, distinct, mix);
    for (int i = 0; i < n && i < 12; i++) {
        int k = snprintf(line, sizeof line, "%-12s|%5d|%08x|%.3s\n", all[i]->word,
                         all[i]->count, fnv1a(all[i]->word), all[i]->word);
        fwrite(line, 1, k, stdout);
    }
    fflush(stdout);
    static const char done[] = "strings done\n";
    write(1, done, sizeof done - 1);
    return 0;
}
