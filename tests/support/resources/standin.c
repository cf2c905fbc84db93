/* Stand-in for python.exe in Wine tests: records its arguments (as the MSVC runtime parses them, like
   python.exe) and its environment to %AIPC_STANDIN_OUT% as UTF-8, then exits with %AIPC_STANDIN_EXIT%. */
#include <windows.h>
#include <stdio.h>
#include <stdlib.h>
#include <wchar.h>

static void put(FILE *f, const wchar_t *tag, const wchar_t *text) {
    char buf[32768];
    int n = WideCharToMultiByte(CP_UTF8, 0, text, -1, buf, sizeof buf, NULL, NULL);
    fprintf(f, "%ls\t%s\n", tag, n > 0 ? buf : "?");
}

int wmain(int argc, wchar_t **argv) {
    const wchar_t *out = _wgetenv(L"AIPC_STANDIN_OUT");
    if (!out) return 90;
    FILE *f = _wfopen(out, L"wb");
    if (!f) return 91;
    for (int i = 1; i < argc; i++) put(f, L"ARG", argv[i]);
    wchar_t cwd[4096];
    if (GetCurrentDirectoryW(4096, cwd)) put(f, L"CWD", cwd);
    LPWCH env = GetEnvironmentStringsW();
    for (LPWCH p = env; *p; p += wcslen(p) + 1) put(f, L"ENV", p);
    FreeEnvironmentStringsW(env);
    fclose(f);
    const wchar_t *code = _wgetenv(L"AIPC_STANDIN_EXIT");
    return code ? _wtoi(code) : 0;
}
