/* libipt's block decoder over an Intel PT trace: the peer tracemill's walk is measured
 * against (`pipeline-bench --libipt`, benches/README.md).
 *
 *   ipt-walk TRACE.pt IMAGES.txt [RUNS]
 *
 * IMAGES.txt (written by `pt-bundle`, benches/src/pt_bundle.rs): one loadable segment
 * a line, as libipt's pt_iscache_add_file takes it: a file (relative to IMAGES.txt), the
 * segment's offset and size in it, and its virtual address (hex). The segments go into one
 * image section cache (libipt's own, as ptxed uses it) with a limit large enough to keep
 * them all mapped. Each run allocates a block decoder, syncs forward from the trace's
 * start and walks every block to the end (events taken as they come, errors resynced at
 * the next PSB, as ptxed does), then prints one line:
 *
 *   insns BLOCKS_INSNS blocks N errors N cpu_s S wall_s S
 *
 * CPU time is the thread's (CLOCK_THREAD_CPUTIME_ID); image loading is not timed.
 * Built by benches/scripts/ipt-walk.sh against the installed libipt (Debian: libipt-dev).
 */
#define _GNU_SOURCE
#include <intel-pt.h>

#include <errno.h>
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double seconds(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

static uint8_t *read_file(const char *path, size_t *size)
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
	buf = malloc(n ? (size_t) n : 1);
	if (buf && fread(buf, 1, (size_t) n, f) != (size_t) n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	*size = (size_t) n;
	return buf;
}

/* Add every segment of IMAGES.txt to the cache; their section ids go to `isids`. */
static int load_images(struct pt_image_section_cache *iscache, const char *list,
		       int *isids, int max)
{
	char copy[4096], dir[4096], line[4096 + 64], name[4096], path[8192];
	unsigned long long offset, size, addr;
	int n = 0;
	FILE *f;

	/* dirname() may modify its argument and return a pointer into it. */
	snprintf(copy, sizeof(copy), "%s", list);
	snprintf(dir, sizeof(dir), "%s", dirname(copy));
	f = fopen(list, "r");
	if (!f)
		return -1;
	while (n < max && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%4095s %llx %llx %llx", name, &offset, &size, &addr) != 4)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		isids[n] = pt_iscache_add_file(iscache, path, offset, size, addr);
		if (isids[n] < 0) {
			fprintf(stderr, "%s: %s\n", path, pt_errstr(pt_errcode(isids[n])));
			fclose(f);
			return -1;
		}
		n++;
	}
	fclose(f);
	return n;
}

struct counts {
	uint64_t insns, blocks, errors;
};

/* Drain pending events; returns the decoder status. */
static int events(struct pt_block_decoder *dec, int status)
{
	while (status & pts_event_pending) {
		struct pt_event ev;

		status = pt_blk_event(dec, &ev, sizeof(ev));
		if (status < 0)
			break;
	}
	return status;
}

static void walk(struct pt_block_decoder *dec, struct counts *c)
{
	for (;;) {
		int status = pt_blk_sync_forward(dec);

		if (status < 0) {
			if (status != -pte_eos)
				c->errors++;
			return;
		}
		for (;;) {
			struct pt_block block;

			status = events(dec, status);
			if (status < 0)
				break;
			status = pt_blk_next(dec, &block, sizeof(block));
			c->insns += block.ninsn;
			c->blocks += block.ninsn ? 1 : 0;
			if (status < 0)
				break;
		}
		if (status == -pte_eos)
			return;
		c->errors++;
		if (c->errors <= 5) {
			uint64_t off = 0;

			pt_blk_get_offset(dec, &off);
			fprintf(stderr, "error at offset %#llx: %s\n",
				(unsigned long long) off, pt_errstr(pt_errcode(status)));
		}
	}
}

int main(int argc, char **argv)
{
	struct pt_image_section_cache *iscache;
	int isids[64], nimages, runs, r, i;
	struct pt_config config;
	uint8_t *trace;
	size_t size;

	if (argc < 3) {
		fprintf(stderr, "usage: %s TRACE.pt IMAGES.txt [RUNS]\n", argv[0]);
		return 2;
	}
	runs = argc > 3 ? atoi(argv[3]) : 1;
	trace = read_file(argv[1], &size);
	if (!trace) {
		fprintf(stderr, "%s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	iscache = pt_iscache_alloc(NULL);
	/* Keep every section mapped: decoding, not mapping, is what is measured. */
	pt_iscache_set_limit(iscache, UINT64_C(1) << 32);
	nimages = load_images(iscache, argv[2], isids, 64);
	if (nimages <= 0) {
		fprintf(stderr, "%s: no image\n", argv[2]);
		return 1;
	}

	pt_config_init(&config);
	config.begin = trace;
	config.end = trace + size;

	for (r = 0; r < runs; r++) {
		struct pt_block_decoder *dec = pt_blk_alloc_decoder(&config);
		struct pt_image *image;
		struct counts c = { 0, 0, 0 };
		double cpu, wall;

		if (!dec) {
			fprintf(stderr, "cannot allocate a block decoder\n");
			return 1;
		}
		image = pt_blk_get_image(dec);
		for (i = 0; i < nimages; i++) {
			int err = pt_image_add_cached(image, iscache, isids[i], NULL);

			if (err < 0) {
				fprintf(stderr, "image: %s\n", pt_errstr(pt_errcode(err)));
				return 1;
			}
		}
		cpu = seconds(CLOCK_THREAD_CPUTIME_ID);
		wall = seconds(CLOCK_MONOTONIC);
		walk(dec, &c);
		cpu = seconds(CLOCK_THREAD_CPUTIME_ID) - cpu;
		wall = seconds(CLOCK_MONOTONIC) - wall;
		printf("insns %llu blocks %llu errors %llu cpu_s %.6f wall_s %.6f\n",
		       (unsigned long long) c.insns, (unsigned long long) c.blocks,
		       (unsigned long long) c.errors, cpu, wall);
		fflush(stdout);
		pt_blk_free_decoder(dec);
	}
	pt_iscache_free(iscache);
	free(trace);
	return 0;
}
