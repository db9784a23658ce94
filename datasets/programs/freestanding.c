/* A small freestanding program (no libc: gcc -static -nostdlib): switch statements, a
 * recursion, loops and calls through a table of function pointers. Its code is small, so
 * the samples whose execution is a synthetic walk over it stay small. Never run: the
 * synthetic walk follows its control-flow graph. */

typedef unsigned long u64;

static volatile u64 sink;

__attribute__((noinline)) static u64 step(u64 x) {
    switch (x % 7) {
    case 0: return x * 3 + 1;
    case 1: return x >> 1;
    case 2: return x ^ 0x5555;
    case 3: return x + 17;
    case 4: return (x << 2) - x;
    case 5: return x / 3;
    default: return x - 1;
    }
}

__attribute__((noinline)) static u64 fib(u64 n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

__attribute__((noinline)) static u64 op_add(u64 a, u64 b) { return a + b; }
__attribute__((noinline)) static u64 op_xor(u64 a, u64 b) { return a ^ b; }
__attribute__((noinline)) static u64 op_mul(u64 a, u64 b) { return a * (b | 1); }
__attribute__((noinline)) static u64 op_min(u64 a, u64 b) { return a < b ? a : b; }

static u64 (*const ops[4])(u64, u64) = {op_add, op_xor, op_mul, op_min};

__attribute__((noinline)) static u64 checksum(const unsigned char *p, u64 n) {
    u64 h = 1469598103934665603ul;
    for (u64 i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ul;
        if (h & 1)
            h = step(h);
    }
    return h;
}

__attribute__((noinline)) static u64 run(u64 x) {
    for (u64 i = 0; i < 100000; i++) {
        x = step(x);
        x = ops[x & 3](x, i);
        if ((i & 255) == 0)
            x += fib(i & 15);
        if ((i & 1023) == 0)
            x ^= checksum((const unsigned char *)&x, sizeof x);
        sink = x;
    }
    return x;
}

void _start(void) {
    sink = run(12345);
    __asm__ volatile("mov $60, %eax; xor %edi, %edi; syscall; hlt");
    __builtin_unreachable();
}
