/* libxdc (nyx-fuzz/libxdc, the decoder of kAFL and Nyx) over an Intel PT trace: the
 * fuzzers' peer tracemill is measured against (`pipeline-bench --libxdc`,
 * benches/README.md).
 *
 *   xdc-walk TRACE.pt IMAGES.txt [RUNS] [--trace]
 *
 * The input is ipt-walk's (benches/libipt/ipt-walk.c): the raw PT file and IMAGES.txt,
 * written by `pt-bundle`, one loadable segment a line (a file relative to IMAGES.txt, the
 * segment's offset and size in it, its virtual address; hex). The segments are copied into
 * one zero-filled buffer spanning them, from which libxdc's page-fetch callback hands out
 * pages; libxdc's one IP filter range is that span (libxdc needs at least one range set,
 * as the trace's IP filters were configured; this trace has none and all its code is in
 * the span).
 *
 * WHAT LIBXDC COMPUTES: in its default ("fast") mode, a coverage bitmap, as AFL's: each
 * conditional branch's outcome and each indirect transfer's (source, target) pair is hashed
 * into a 64 KiB array of 8-bit counters. Edges that collide in the hash share a counter,
 * counters wrap at 256, direct jumps and calls are not recorded, and the bitmap says
 * nothing of instructions, order or time. It is NOT an exact decode: no instruction or
 * branch counts, no blocks, no rows. Its speed comes from caching, per (entry address,
 * pending TNT bits), the bitmap increments of up to 56 conditional branches at once, so a
 * trace that repeats itself (as the benchmark's does) is mostly cache hits. libxdc also
 * requires traces without RET compression (IA32_RTIT_CTL.DisRETC set: a compressed RET is
 * a TNT bit it does not expect) and without CYC, MTC or TSC packets: run it on a bundle
 * made by `pt-bundle --no-ret-compression`.
 *
 * Each run makes a fresh decoder (libxdc_init: cold caches, empty bitmap), decodes the
 * whole trace once with libxdc_decode, and prints one line:
 *
 *   bytes N result R bitmap_hit N bitmap_sum N blocks N edges N cpu_s S wall_s S
 *
 * `result` is libxdc's decoder_result_t (0 success, 1 success with a PT overflow, 2 page
 * fault, 3 error, 4 unknown packet), `bitmap_hit` the bitmap's nonzero counters (distinct
 * edge hashes: a lower bound of the distinct edges), `bitmap_sum` the sum of the counters
 * (wrapped at 256, not a count), `blocks` the basic blocks libxdc disassembled (its
 * basic-block callback: distinct blocks reached, found lazily). `edges` is 0 unless
 * `--trace`: libxdc's trace mode instead, which calls back for every transition it decodes
 * (conditional and direct branches, indirect ones, enables and disables) and skips the
 * caches: slow, to compare counts, not to time. CPU time is the thread's; loading the
 * trace and the images and libxdc_init are not timed.
 *
 * Built by hand against a libxdc built from source (it needs capstone 4: Debian's
 * libcapstone-dev), never from this repository: see benches/README.md.
 */
#define _GNU_SOURCE
#include <libxdc.h>

#include <errno.h>
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PAGE 0x1000ULL
#define BITMAP_SIZE 0x10000

static double seconds(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

/* The whole file, with `pad` more bytes of 0x55 after it (libxdc's end mark). */
static uint8_t *read_file(const char *path, size_t *size, size_t pad)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
		fclose(f);
		return NULL;
	}
	buf = malloc((size_t) n + pad + 1);
	if (buf && fread(buf, 1, (size_t) n, f) != (size_t) n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	if (buf)
		memset(buf + n, 0x55, pad + 1);
	*size = (size_t) n;
	return buf;
}

/* The code: one buffer from `base` (page-aligned) to `end`, the segments copied in. */
struct memory {
	uint64_t base, end;
	uint8_t *bytes;
};

struct segment {
	char path[8192];
	unsigned long long offset, size, addr;
};

static int load_images(struct memory *mem, const char *list)
{
	char copy[4096], dir[4096], line[4096 + 64], name[4096];
	static struct segment segs[64];
	int n = 0, i;
	FILE *f;

	snprintf(copy, sizeof(copy), "%s", list);
	snprintf(dir, sizeof(dir), "%s", dirname(copy));
	f = fopen(list, "r");
	if (!f)
		return -1;
	while (n < 64 && fgets(line, sizeof(line), f)) {
		struct segment *s = &segs[n];

		if (sscanf(line, "%4095s %llx %llx %llx", name, &s->offset, &s->size, &s->addr) != 4)
			continue;
		snprintf(s->path, sizeof(s->path), "%s/%s", dir, name);
		n++;
	}
	fclose(f);
	if (n == 0)
		return -1;
	mem->base = UINT64_MAX;
	mem->end = 0;
	for (i = 0; i < n; i++) {
		if (segs[i].addr < mem->base)
			mem->base = segs[i].addr;
		if (segs[i].addr + segs[i].size > mem->end)
			mem->end = segs[i].addr + segs[i].size;
	}
	mem->base &= ~(PAGE - 1);
	mem->end = (mem->end + PAGE - 1) & ~(PAGE - 1);
	mem->bytes = calloc(1, mem->end - mem->base);
	if (!mem->bytes)
		return -1;
	for (i = 0; i < n; i++) {
		FILE *g = fopen(segs[i].path, "rb");

		if (!g || fseek(g, (long) segs[i].offset, SEEK_SET) ||
		    fread(mem->bytes + (segs[i].addr - mem->base), 1, segs[i].size, g) !=
			    segs[i].size) {
			fprintf(stderr, "%s: cannot read %#llx bytes at %#llx\n", segs[i].path,
				segs[i].size, segs[i].offset);
			if (g)
				fclose(g);
			return -1;
		}
		fclose(g);
	}
	return n;
}

/* libxdc's page-fetch callback: the page at `page` (any address in it), or failure. */
static void *fetch_page(void *opaque, uint64_t page, bool *success)
{
	struct memory *mem = opaque;

	page &= ~(PAGE - 1);
	if (page < mem->base || page >= mem->end) {
		*success = false;
		return NULL;
	}
	*success = true;
	return mem->bytes + (page - mem->base);
}

static uint64_t blocks, edges;

/* libxdc calls it with the disassembly mode before the block's bounds, though libxdc.h
 * declares it without (libxdc.c: basic_block_callback(opaque, mode, base, cofi)). */
static void on_block(void *opaque, disassembler_mode_t mode, uint64_t base, uint64_t cofi)
{
	(void) opaque;
	(void) mode;
	(void) base;
	(void) cofi;
	blocks++;
}

static void on_edge(void *opaque, uint64_t from, uint64_t to)
{
	(void) opaque;
	(void) from;
	(void) to;
	edges++;
}

int main(int argc, char **argv)
{
	int runs = 1, trace_mode = 0, r, i, positional = 0;
	const char *trace_path = NULL, *images = NULL;
	struct memory mem;
	uint8_t *trace, *bitmap;
	size_t size;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--trace"))
			trace_mode = 1;
		else if (positional == 0 && ++positional)
			trace_path = argv[i];
		else if (positional == 1 && ++positional)
			images = argv[i];
		else if (positional == 2 && ++positional)
			runs = atoi(argv[i]);
	}
	if (!trace_path || !images) {
		fprintf(stderr, "usage: %s TRACE.pt IMAGES.txt [RUNS] [--trace]\n", argv[0]);
		return 2;
	}
	trace = read_file(trace_path, &size, 16);
	if (!trace) {
		fprintf(stderr, "%s: %s\n", trace_path, strerror(errno));
		return 1;
	}
	if (load_images(&mem, images) <= 0) {
		fprintf(stderr, "%s: no image\n", images);
		return 1;
	}
	bitmap = malloc(BITMAP_SIZE);

	for (r = 0; r < runs; r++) {
		uint64_t filter[4][2] = { { mem.base, mem.end - 1 } };
		uint64_t hit = 0, sum = 0;
		decoder_result_t result;
		libxdc_t *dec;
		double cpu, wall;

		memset(bitmap, 0, BITMAP_SIZE);
		dec = libxdc_init(filter, fetch_page, &mem, bitmap, BITMAP_SIZE);
		if (!dec) {
			fprintf(stderr, "libxdc_init failed\n");
			return 1;
		}
		blocks = edges = 0;
		libxdc_register_bb_callback(
			dec, (void (*)(void *, uint64_t, uint64_t))(void (*)(void)) on_block, NULL);
		if (trace_mode) {
			libxdc_register_edge_callback(dec, on_edge, NULL);
			libxdc_enable_tracing(dec);
		}
		cpu = seconds(CLOCK_THREAD_CPUTIME_ID);
		wall = seconds(CLOCK_MONOTONIC);
		result = libxdc_decode(dec, trace, size);
		cpu = seconds(CLOCK_THREAD_CPUTIME_ID) - cpu;
		wall = seconds(CLOCK_MONOTONIC) - wall;
		for (i = 0; i < BITMAP_SIZE; i++) {
			hit += bitmap[i] != 0;
			sum += bitmap[i];
		}
		if (result == decoder_page_fault)
			fprintf(stderr, "page fault at %#llx\n",
				(unsigned long long) libxdc_get_page_fault_addr(dec));
		printf("bytes %zu result %d bitmap_hit %llu bitmap_sum %llu blocks %llu edges %llu "
		       "cpu_s %.6f wall_s %.6f\n",
		       size, (int) result, (unsigned long long) hit, (unsigned long long) sum,
		       (unsigned long long) blocks, (unsigned long long) edges, cpu, wall);
		fflush(stdout);
		libxdc_free(dec);
	}
	free(bitmap);
	free(mem.bytes);
	free(trace);
	return 0;
}
