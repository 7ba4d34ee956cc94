// The header self-containment test links one translation unit per public header; its
// success is that all of them compiled alone.
int main() { return 0; }
