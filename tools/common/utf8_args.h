// UTF-8 command lines and file names on every platform. kiln's strings are
// UTF-8 throughout; Windows hands main() its arguments in the ANSI code page
// (which cannot hold most non-ASCII file names) and opens `char` paths in
// that code page too, so there the arguments are re-read from the UTF-16
// command line and paths go to the C++ library as UTF-16 (_wfopen).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#if defined(_WIN32)
#ifndef NOMINMAX
#define NOMINMAX
#endif
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#include <shellapi.h>
#endif

namespace kiln_tools {

// The program's arguments (argv[0] included) as UTF-8.
inline std::vector<std::string> utf8_args(int argc, char** argv) {
#if defined(_WIN32)
    int n = 0;
    if (LPWSTR* w = CommandLineToArgvW(GetCommandLineW(), &n)) {
        std::vector<std::string> out;
        for (int i = 0; i < n; ++i) {
            const int len = WideCharToMultiByte(CP_UTF8, 0, w[i], -1, nullptr, 0, nullptr, nullptr);
            std::string s(len > 0 ? static_cast<size_t>(len - 1) : 0, '\0');
            if (len > 1) WideCharToMultiByte(CP_UTF8, 0, w[i], -1, s.data(), len, nullptr, nullptr);
            out.push_back(std::move(s));
        }
        LocalFree(w);
        if (static_cast<int>(out.size()) == argc) return out;
    }
#endif
    return std::vector<std::string>(argv, argv + argc);
}

// A path for a UTF-8 file name: std::fstream opens it with the wide API on Windows.
inline std::filesystem::path utf8_path(const std::string& s) {
    return std::filesystem::path(std::u8string(s.begin(), s.end()));
}

}  // namespace kiln_tools
