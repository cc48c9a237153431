/*
 * fencewrap: the parent of every worker, which fences it (docs/fault-tolerance.md).
 *
 *   fencewrap [--container] LEASE EXIT_FILE -- COMMAND [ARG...]
 *
 * Runs COMMAND and stops it when the node's lease with the console runs out, even if the
 * agent itself is frozen: the agent renews LEASE after each heartbeat the console applied,
 * and the console declares the workers lost only after a longer timeout, so by then no copy
 * of this worker can still be running.
 *
 * LEASE holds "EXPIRES GRACE": CLOCK_BOOTTIME seconds after which COMMAND gets SIGTERM, and
 * the seconds after that until SIGKILL. EXPIRES <= 0 means no fence. An unreadable or
 * missing LEASE keeps the last values read (a lease only runs out, it is never extended by
 * an error).
 *
 * Process runtime (default): the agent started this wrapper as a session leader; COMMAND
 * stays in its process group, which the agent signals as a whole. The wrapper only notes
 * those signals, is a child subreaper and, once stopped, waits for every descendant (the
 * grace belongs to the whole worker), then writes COMMAND's exit code to EXIT_FILE
 * ("CODE\n", or "CODE fenced\n") and kills what is left of the group, itself included.
 *
 * --container: inside a container (EXIT_FILE is "-"), under the engine's init, which sends
 * a stop signal to this process only. COMMAND gets a process group of its own, signals are
 * forwarded to it, and the wrapper exits with COMMAND's status.
 *
 * COMMAND gets SIGKILL should the wrapper itself die (PR_SET_PDEATHSIG): a killed wrapper
 * never leaves its worker running unfenced.
 *
 * A few hundred KiB of memory per worker, where a Python wrapper took about 13 MB.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define POLL_NS 200000000L /* look at the lease five times a second */

static volatile sig_atomic_t stop_signal = 0;

static void note_stop(int sig) { stop_signal = sig; }

static double now_boot(void) {
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void say(const char *text) {
    size_t len = strlen(text);
    while (len > 0) {
        ssize_t n = write(STDOUT_FILENO, text, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        text += n;
        len -= (size_t)n;
    }
}

static void read_lease(const char *path, double *expires, double *grace) {
    char buf[128];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return;
    buf[n] = '\0';
    char *end;
    double e = strtod(buf, &end);
    if (end == buf) return;
    char *rest = end;
    double g = strtod(rest, &end);
    *expires = e;
    if (end != rest && g >= 0) *grace = g;
}

static void write_exit(const char *path, int code, int fenced) {
    if (strcmp(path, "-") == 0) return;
    char tmp[4096], line[64];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) return;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return;
    int len = snprintf(line, sizeof line, fenced ? "%d fenced\n" : "%d\n", code);
    if (write(fd, line, (size_t)len) != len) {
        close(fd);
        return;
    }
    close(fd);
    rename(tmp, path);
}

static int status_code(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 255;
}

int main(int argc, char **argv) {
    int container = 0, first = 1;
    if (argc > 1 && strcmp(argv[1], "--container") == 0) {
        container = 1;
        first = 2;
    }
    if (argc - first < 4 || strcmp(argv[first + 2], "--") != 0) {
        say("usage: fencewrap [--container] LEASE EXIT_FILE -- COMMAND [ARG...]\n");
        return 2;
    }
    const char *lease = argv[first], *exit_file = argv[first + 1];
    char **command = &argv[first + 3];

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = note_stop; /* a handler, so COMMAND starts with default dispositions */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

    /* The group is the worker: never signal the group of whoever started this wrapper. */
    if (!container && getpgrp() != getpid()) setpgid(0, 0);

    sigset_t chld, old;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, &old);

    double expires = 0, grace = 5;
    read_lease(lease, &expires, &grace);

    pid_t self = getpid();
    pid_t child = fork();
    if (child < 0) {
        say("[agent] cannot start the worker: fork failed\n");
        write_exit(exit_file, 127, 0);
        return 127;
    }
    if (child == 0) {
        /* Should this wrapper be killed, COMMAND dies with it rather than run on unfenced
         * (the agent then kills the rest of the session: agents/node/runtimes/sessions.py). */
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        if (getppid() != self) _exit(137); /* it died before the line above */
        if (container) setpgid(0, 0);
        sigprocmask(SIG_SETMASK, &old, NULL);
        execvp(command[0], command);
        char msg[512];
        snprintf(msg, sizeof msg, "[agent] cannot start %s: %s\n", command[0], strerror(errno));
        say(msg);
        _exit(127);
    }
    if (container) setpgid(child, child);
    pid_t group = container ? child : getpgrp();

    int code = -1, main_done = 0, fenced = 0, stopping = 0;
    double kill_at = 0;
    struct timespec poll = {0, POLL_NS};
    for (;;) {
        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
            if (pid == child) {
                main_done = 1;
                code = status_code(status);
            }
        }
        int none_left = pid < 0 && errno == ECHILD;
        if (stop_signal) {
            int sig = stop_signal;
            stop_signal = 0;
            stopping = 1;
            if (container && !main_done) kill(-group, sig);
        }
        /* Stopped (or fenced): the rest of the worker keeps its grace to save and exit. */
        if (main_done && (!(stopping || fenced) || none_left)) break;

        read_lease(lease, &expires, &grace);
        double now = now_boot();
        if (!fenced && expires > 0 && now >= expires) {
            fenced = 1;
            kill_at = now + grace;
            char msg[256];
            snprintf(msg, sizeof msg,
                     "[agent] fence: the node's lease with the console ran out; stopping this "
                     "worker so that no second copy can run (SIGTERM, SIGKILL in %gs)\n",
                     grace);
            say(msg);
            kill(-group, SIGTERM);
        }
        if (fenced && now >= kill_at) {
            write_exit(exit_file, 137, 1);
            kill(-group, SIGKILL); /* process runtime: this wrapper too */
            return 137;
        }
        sigtimedwait(&chld, NULL, &poll);
    }
    if (code < 0) code = 255;
    write_exit(exit_file, code, fenced);
    if (!container) kill(-group, SIGKILL); /* as in a container: leftovers die with it */
    return code;
}
