/* A stand-in capture agent for scripts/windows_smoke.py, built for Windows with mingw and natively for
 * the Linux reference run. Configured as
 *   command = ["<this program>", "{prompt_file}", "{session_id}", "{run_id}"]
 * it reads its stdin to the end (the prompt: profiles default to stdin = "prompt"), appends
 * "- captured by <run id>" to .almanac/pages/notes.md under its working directory (the repo root),
 * appends one JSON line describing the call to the file named by FAKE_AGENT_LOG (argv, cwd, bytes on
 * stdin and their first line, the prompt file's size, FAKE_AGENT_INHERITED as it saw it), sleeps
 * FAKE_AGENT_SLEEP_MS milliseconds if set, and exits with FAKE_AGENT_EXIT (default 0). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#ifdef _WIN32
#include <direct.h>
#include <fcntl.h>
#include <io.h>
#include <windows.h>
#define getcwd _getcwd
#define SLEEP_MS(n) Sleep(n)
#define MKDIR(p) _mkdir(p)
#define SEP "\\"
#else
#include <sys/stat.h>
#include <unistd.h>
#define MKDIR(p) mkdir(p, 0755)
#define SLEEP_MS(n) usleep((n) * 1000)
#define SEP "/"
#endif

static void json_str(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static long file_size(const char *p) {
    FILE *f = fopen(p, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

int main(int argc, char **argv) {
#ifdef _WIN32
    _setmode(_fileno(stdin), _O_BINARY);
#endif
    /* Started as node would be by an npm shim (`node.exe <script> args...`): the script is not ours. */
    const char *script = NULL;
    if (argc > 1 && strlen(argv[1]) > 3 && strcmp(argv[1] + strlen(argv[1]) - 3, ".js") == 0) {
        script = argv[1];
        argv[1] = argv[0];
        argv++;
        argc--;
    }
    size_t cap = 1 << 16, len = 0, n;
    char *in = malloc(cap);
    while ((n = fread(in + len, 1, cap - len, stdin)) > 0) {
        len += n;
        if (len == cap) in = realloc(in, cap *= 2);
    }
    size_t first = 0;
    while (first < len && in[first] != '\n' && first < 200) first++;

    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd)) strcpy(cwd, "?");
    const char *run_id = argc > 3 ? argv[3] : "?";

    MKDIR(".almanac");
    MKDIR(".almanac" SEP "pages");
    FILE *notes = fopen(".almanac" SEP "pages" SEP "notes.md", "ab");
    int wrote = 0;
    if (notes) {
        wrote = fprintf(notes, "- captured by %s\n", run_id) > 0;
        fclose(notes);
    }

    const char *log = getenv("FAKE_AGENT_LOG");
    if (log) {
        FILE *f = fopen(log, "ab");
        if (f) {
            fputs("{\"argv\":[", f);
            for (int i = 0; i < argc; i++) {
                if (i) fputc(',', f);
                json_str(f, argv[i], strlen(argv[i]));
            }
            fputs("],\"script\":", f);
            if (script) json_str(f, script, strlen(script));
            else fputs("null", f);
            fputs(",\"cwd\":", f);
            json_str(f, cwd, strlen(cwd));
            fprintf(f, ",\"stdinBytes\":%lu,\"stdinFirstLine\":", (unsigned long)len);
            json_str(f, in, first);
            fprintf(f, ",\"promptFileBytes\":%ld,\"wroteNotes\":%s,\"inherited\":",
                    argc > 1 ? file_size(argv[1]) : -1L, wrote ? "true" : "false");
            const char *inh = getenv("FAKE_AGENT_INHERITED");
            if (inh) json_str(f, inh, strlen(inh));
            else fputs("null", f);
            fputs("}\n", f);
            fclose(f);
        }
    }
    const char *sleep_ms = getenv("FAKE_AGENT_SLEEP_MS");
    if (sleep_ms && atoi(sleep_ms) > 0) SLEEP_MS(atoi(sleep_ms));
    const char *code = getenv("FAKE_AGENT_EXIT");
    return code ? atoi(code) : 0;
}
