/* bcryptprimitives.dll for wine 8.0, which lacks it: Rust's standard library (1.78 and later) imports
 * ProcessPrng from it to seed HashMap keys and to make random bytes. Placed beside a Rust .exe, this
 * DLL is loaded instead and forwards to advapi32's RtlGenRandom (SystemFunction036), which wine has.
 * Build: x86_64-w64-mingw32-gcc -shared -O2 -o bcryptprimitives.dll bcryptprimitives-shim.c
 * Used only by scripts/windows_smoke.py; real Windows has the DLL. */
#include <windows.h>

typedef BOOLEAN(WINAPI *gen_random)(PVOID, ULONG);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    static gen_random f = 0;
    if (!f) {
        f = (gen_random)GetProcAddress(LoadLibraryA("advapi32.dll"), "SystemFunction036");
        if (!f) return FALSE;
    }
    while (len) {
        ULONG k = len > 0x10000000 ? 0x10000000 : (ULONG)len;
        if (!f(data, k)) return FALSE;
        data += k;
        len -= k;
    }
    return TRUE;
}
