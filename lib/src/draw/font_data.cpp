// DejaVu Sans (Debian's fonts-dejavu-core), embedded whole: CMake finds the
// file and passes its path as MHA_FONT_FILE; the assembler's .incbin copies
// its bytes into .rodata between two hidden symbols. (The DejaVu fonts may be
// embedded and redistributed: Bitstream Vera license, see the package's
// copyright file.)
#include <cstddef>

#include "mha/draw/text.hpp"

#ifndef MHA_FONT_FILE
#error "MHA_FONT_FILE must name the .ttf file to embed (set by CMakeLists.txt)"
#endif

asm(".pushsection .rodata\n"
    ".balign 16\n"
    ".globl mha_font_begin\n"
    ".hidden mha_font_begin\n"
    "mha_font_begin:\n"
    ".incbin \"" MHA_FONT_FILE
    "\"\n"
    ".globl mha_font_end\n"
    ".hidden mha_font_end\n"
    "mha_font_end:\n"
    ".popsection\n");

// Hidden: addressed PC-relative, with or without PIE.
extern "C" __attribute__((visibility("hidden"))) const unsigned char mha_font_begin[];
extern "C" __attribute__((visibility("hidden"))) const unsigned char mha_font_end[];

namespace mha {

const unsigned char* embedded_font_data() {
  return mha_font_begin;
}

std::size_t embedded_font_size() {
  return static_cast<std::size_t>(mha_font_end - mha_font_begin);
}

}  // namespace mha
