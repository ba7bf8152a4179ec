/* envexec.exe COMMAND LINE...: runs COMMAND LINE with environment variables set that wine will not
 * pass through from Unix. wine replaces USERPROFILE (and APPDATA, TEMP, ...) with the prefix's own
 * values and drops HOME, so scripts/windows_smoke.py passes each as ALMSMOKE_SET_<NAME>=<value>; this
 * program sets <NAME>=<value>, removes the ALMSMOKE_SET_ variables, starts the rest of its own command
 * line (verbatim) with its standard handles (inheritable, as a Windows parent that pipes a child's
 * output passes them), waits, and exits with the child's exit code (125 if it cannot start it). */
#include <windows.h>
#include <stdio.h>
#include <wchar.h>

static const wchar_t PREFIX[] = L"ALMSMOKE_SET_";

int wmain(void) {
    /* Collect first, then change: the block is not to be modified while walking it. */
    wchar_t *block = GetEnvironmentStringsW();
    size_t plen = wcslen(PREFIX), n = 0, cap = 64;
    wchar_t **sets = malloc(cap * sizeof *sets);
    for (wchar_t *p = block; *p; p += wcslen(p) + 1) {
        if (_wcsnicmp(p, PREFIX, plen) == 0) {
            if (n == cap) sets = realloc(sets, (cap *= 2) * sizeof *sets);
            sets[n++] = _wcsdup(p);
        }
    }
    FreeEnvironmentStringsW(block);
    for (size_t i = 0; i < n; i++) {
        wchar_t *eq = wcschr(sets[i], L'=');
        if (!eq) continue;
        *eq = 0;
        SetEnvironmentVariableW(sets[i], NULL);
        SetEnvironmentVariableW(sets[i] + plen, eq + 1);
    }

    /* The rest of the command line after our own program name (quoted or not). */
    wchar_t *cl = GetCommandLineW();
    if (*cl == L'"') {
        cl++;
        while (*cl && *cl != L'"') cl++;
        if (*cl) cl++;
    } else {
        while (*cl && *cl != L' ' && *cl != L'\t') cl++;
    }
    while (*cl == L' ' || *cl == L'\t') cl++;
    if (!*cl) {
        fwprintf(stderr, L"envexec: no command given\n");
        return 125;
    }
    wchar_t *cmd = _wcsdup(cl);

    STARTUPINFOW si;
    PROCESS_INFORMATION pi;
    ZeroMemory(&si, sizeof si);
    si.cb = sizeof si;
    si.dwFlags = STARTF_USESTDHANDLES;
    si.hStdInput = GetStdHandle(STD_INPUT_HANDLE);
    si.hStdOutput = GetStdHandle(STD_OUTPUT_HANDLE);
    si.hStdError = GetStdHandle(STD_ERROR_HANDLE);
    HANDLE hs[3] = {si.hStdInput, si.hStdOutput, si.hStdError};
    for (int i = 0; i < 3; i++)
        if (hs[i] && hs[i] != INVALID_HANDLE_VALUE)
            SetHandleInformation(hs[i], HANDLE_FLAG_INHERIT, HANDLE_FLAG_INHERIT);
    if (!CreateProcessW(NULL, cmd, NULL, NULL, TRUE, 0, NULL, NULL, &si, &pi)) {
        fwprintf(stderr, L"envexec: cannot start %ls: error %lu\n", cmd, GetLastError());
        return 125;
    }
    CloseHandle(pi.hThread);
    WaitForSingleObject(pi.hProcess, INFINITE);
    DWORD code = 125;
    GetExitCodeProcess(pi.hProcess, &code);
    CloseHandle(pi.hProcess);
    return (int)code;
}
