/*
 * signals: control flow the program does not choose.
 *
 * A signal raised by the program itself (delivered when the tgkill syscall returns), a
 * SIGSEGV from a store through a null pointer and a SIGFPE from an integer division by
 * zero (both faults: the faulting instruction does not retire; the handler leaves with
 * siglongjmp), and between them a prime sieve and large block copies (REP MOVS/STOS in
 * libc's memcpy/memset).
 *
 * Input (stdin, optional): "sieve_limit copies", e.g. "60000 8".
 */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static sigjmp_buf recover;
static volatile sig_atomic_t usr1_seen, faults;

static void on_usr1(int sig) { usr1_seen += sig; }

static void on_fault(int sig)
{
    faults++;
    siglongjmp(recover, sig);
}

static int sieve(int limit)
{
    char *composite = calloc(limit + 1, 1);
    int primes = 0;
    for (int i = 2; i <= limit; i++) {
        if (composite[i])
            continue;
        primes++;
        for (long j = (long)i * i; j <= limit; j += i)
            composite[j] = 1;
    }
    free(composite);
    return primes;
}

int main(int argc, char **argv)
{
    (void)argv;
    char in[64];
    ssize_t got = read(0, in, sizeof in - 1);
    in[got > 0 ? got : 0] = 0;
    int limit = 60000, copies = 8;
    sscanf(in, "%d %d", &limit, &copies);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_handler = on_fault;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGFPE, &sa, NULL);

    raise(SIGUSR1);
    printf("usr1 %d\n", (int)usr1_seen);

    /* argc is 1 unless the caller passes arguments: keeps the compiler from proving
     * the pointer null or the divisor zero. */
    volatile int *nowhere = (int *)(long)(argc - 1);
    int sig = sigsetjmp(recover, 1);
    if (sig == 0)
        *nowhere = 42;
    printf("after store: signal %d\n", sig);

    printf("primes up to %d: %d\n", limit, sieve(limit));

    volatile int zero = argc - 1;
    sig = sigsetjmp(recover, 1);
    int q = 0;
    if (sig == 0)
        q = 1000 / zero;
    printf("after divide: signal %d, q %d\n", sig, q);

    size_t size = 1 << 14;
    char *a = malloc(size), *b = malloc(size);
    memset(a, 0x5a, size);
    unsigned long sum = 0;
    for (int i = 0; i < copies; i++) {
        a[i * 97 % size] = (char)i;
        memcpy(b, a, size);
        sum += (unsigned char)b[i * 97 % size] + (unsigned char)b[size - 1 - i];
    }
    free(a);
    free(b);
    printf("copies %d sum %lu faults %d\n", copies, sum, (int)faults);
    fflush(stdout);
    static const char done[] = "signals done\n";
    write(1, done, sizeof done - 1);
    return 0;
}
