// onig_split: split texts with a regex as Hugging Face tokenizers' Split
// pre-tokenizer does (Rust's `onig` crate: Oniguruma, UTF-8, default
// syntax, no options), to check gochat's hand-written scanners against the
// engine Hugging Face itself uses.
//
//   cc -O2 -o /tmp/onig_split onig_split.c -lonig    # Debian: libonig-dev
//   /tmp/onig_split PATTERN < texts.hex > matches.txt
//
// Input: one text per line, hex-encoded UTF-8. Output: one line per text,
// the matches as start-end byte offsets separated by spaces (empty line:
// no match), found leftmost-first from the end of the previous match.
#include <oniguruma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: onig_split PATTERN < texts.hex\n");
    return 2;
  }
  OnigEncoding enc = ONIG_ENCODING_UTF8;
  onig_initialize(&enc, 1);
  regex_t *re;
  OnigErrorInfo einfo;
  const UChar *pat = (const UChar *)argv[1];
  int r = onig_new(&re, pat, pat + strlen(argv[1]), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &einfo);
  if (r != ONIG_NORMAL) {
    UChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(msg, r, &einfo);
    fprintf(stderr, "onig_new: %s\n", msg);
    return 1;
  }
  OnigRegion *region = onig_region_new();
  size_t cap = 1 << 16;
  char *line = malloc(cap);
  unsigned char *text = malloc(cap);
  ssize_t n;
  while ((n = getline(&line, &cap, stdin)) >= 0) {
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
    text = realloc(text, n / 2 + 1);
    size_t len = 0;
    for (ssize_t i = 0; i + 1 < n; i += 2) text[len++] = (unsigned char)(hexval(line[i]) << 4 | hexval(line[i + 1]));
    const UChar *end = text + len;
    size_t pos = 0;
    int first = 1;
    while (pos <= len) {
      r = onig_search(re, text, end, text + pos, end, region, ONIG_OPTION_NONE);
      if (r < 0) break;
      int s = region->beg[0], e = region->end[0];
      printf(first ? "%d-%d" : " %d-%d", s, e);
      first = 0;
      if (e == s) {
        if ((size_t)e >= len) break;
        // step over one character after an empty match
        int k = e + 1;
        while ((size_t)k < len && (text[k] & 0xC0) == 0x80) k++;
        pos = k;
      } else {
        pos = e;
      }
    }
    printf("\n");
    onig_region_free(region, 0);
  }
  onig_free(re);
  onig_end();
  return 0;
}
