/* A recording stand-in for Windows' schtasks.exe (wine's is a stub), for scripts/windows_smoke.py; the
 * same protocol as the shell fake in tests/e2e/schtasks.rs. Placed beside almanac.exe, where Windows
 * looks for a program before System32. Each call is appended to %FAKE_SCHED_DIR%\calls.txt;
 *   /Create /TN <name> /XML <file> /F  copies <file> to %FAKE_SCHED_DIR%\task.xml (bytes unchanged)
 *   /Query /TN <name> /XML             prints task.xml's bytes, or fails as schtasks does when none
 *   /Delete /TN <name> /F              removes task.xml, or fails when none */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <io.h>
#include <process.h>

static char path[4096];

static const char *in_dir(const char *dir, const char *name) {
    snprintf(path, sizeof path, "%s\\%s", dir, name);
    return path;
}

static int copy(const char *from, FILE *to) {
    FILE *f = fopen(from, "rb");
    if (!f) return 0;
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, to);
    fclose(f);
    return 1;
}

int main(int argc, char **argv) {
    const char *dir = getenv("FAKE_SCHED_DIR");
    if (!dir) {
        fprintf(stderr, "fake schtasks: FAKE_SCHED_DIR is not set\n");
        return 1;
    }
    FILE *calls = fopen(in_dir(dir, "calls.txt"), "ab");
    if (calls) {
        fputs("schtasks", calls);
        for (int i = 1; i < argc; i++) fprintf(calls, " %s", argv[i]);
        fputs("\n", calls);
        fclose(calls);
    }
    char task[4096];
    snprintf(task, sizeof task, "%s", in_dir(dir, "task.xml"));
    const char *verb = argc > 1 ? argv[1] : "";
    if (_stricmp(verb, "/Create") == 0) {
        const char *xml = NULL;
        for (int i = 2; i + 1 < argc; i++)
            if (_stricmp(argv[i], "/XML") == 0) xml = argv[i + 1];
        FILE *out = xml ? fopen(task, "wb") : NULL;
        if (!out) {
            fprintf(stderr, "ERROR: Invalid syntax.\n");
            return 1;
        }
        int ok = copy(xml, out);
        fclose(out);
        if (!ok) {
            fprintf(stderr, "ERROR: The system cannot find the file specified.\n");
            return 1;
        }
        /* Keep every registered version too. */
        static int seq;
        char keep[64];
        snprintf(keep, sizeof keep, "created-%d-%d.xml", (int)_getpid(), seq++);
        FILE *k = fopen(in_dir(dir, keep), "wb");
        if (k) { copy(task, k); fclose(k); }
        printf("SUCCESS: The scheduled task has successfully been created.\n");
        return 0;
    }
    if (_stricmp(verb, "/Query") == 0) {
        _setmode(_fileno(stdout), _O_BINARY);
        if (copy(task, stdout)) return 0;
        fprintf(stderr, "ERROR: The system cannot find the file specified.\n");
        return 1;
    }
    if (_stricmp(verb, "/Delete") == 0) {
        if (remove(task) == 0) {
            printf("SUCCESS: The scheduled task was successfully deleted.\n");
            return 0;
        }
        fprintf(stderr, "ERROR: The system cannot find the file specified.\n");
        return 1;
    }
    fprintf(stderr, "fake schtasks: unsupported arguments\n");
    return 1;
}
