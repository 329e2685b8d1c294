/* For tests/test_portability.py: an LD_PRELOAD library under which CPUID answers as an
   AMD family 1Ah (Zen 5) part, the CPU PoCL 3.0's LLVM 14 does not know. Linux's CPUID
   faulting (arch_prctl ARCH_SET_CPUID) makes each CPUID instruction a SIGSEGV, which
   the handler answers: the real CPUID's values with the vendor and family changed. */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <cpuid.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

/* Others (LLVM's crash handler) install SIGSEGV handlers too: ours stays in place and
   hands them the faults that are not CPUID. */
static struct sigaction next_handler;
static int (*real_sigaction)(int, const struct sigaction *, struct sigaction *);

static void on_segv(int sig, siginfo_t *info, void *context)
{
    greg_t *r = ((ucontext_t *)context)->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)r[REG_RIP];
    if (ip[0] != 0x0f || ip[1] != 0xa2) {  /* a real fault */
        if ((next_handler.sa_flags & SA_SIGINFO) && next_handler.sa_sigaction) {
            next_handler.sa_sigaction(sig, info, context);
            return;
        }
        if (next_handler.sa_handler != SIG_DFL && next_handler.sa_handler != SIG_IGN
            && next_handler.sa_handler) {
            next_handler.sa_handler(sig);
            return;
        }
        struct sigaction fallback;
        memset(&fallback, 0, sizeof fallback);
        fallback.sa_handler = SIG_DFL;
        real_sigaction(SIGSEGV, &fallback, NULL);
        return;
    }
    unsigned a, b, c, d, leaf = (unsigned)r[REG_RAX], sub = (unsigned)r[REG_RCX];
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 1);
    __cpuid_count(leaf, sub, a, b, c, d);
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0);
    if (leaf == 0) {
        memcpy(&b, "Auth", 4); memcpy(&d, "enti", 4); memcpy(&c, "cAMD", 4);
    } else if (leaf == 1) {  /* family 0Fh + extended 0Bh = 1Ah, model 44h */
        a = (0x0bu << 20) | (0x4u << 16) | (0xfu << 8) | (0x4u << 4);
    }
    r[REG_RAX] = a; r[REG_RBX] = b; r[REG_RCX] = c; r[REG_RDX] = d;
    r[REG_RIP] += 2;
}

int sigaction(int signum, const struct sigaction *act, struct sigaction *old)
{
    if (!real_sigaction)
        real_sigaction = dlsym(RTLD_NEXT, "sigaction");
    if (signum != SIGSEGV)
        return real_sigaction(signum, act, old);
    if (old)
        *old = next_handler;
    if (act)
        next_handler = *act;
    return 0;
}

__attribute__((constructor)) static void install(void)
{
    real_sigaction = dlsym(RTLD_NEXT, "sigaction");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    real_sigaction(SIGSEGV, &sa, NULL);
    if (syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0) != 0)
        _exit(97);  /* no CPUID faulting here: say so rather than pretend */
}
