package cleanup

import (
	"os"
	"path/filepath"
	"testing"
)

// Removing a file:// prefix removes the empty directories under it, and nothing else: not a
// directory that still holds a file, not one outside the bucket however the prefix is
// spelt, not what a symbolic link points to.
func TestRemoveEmptyDirsStaysInsideThePrefix(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "bucket")
	outside := filepath.Join(base, "outside", "empty")
	target := filepath.Join(base, "target", "empty")
	for _, d := range []string{filepath.Join(root, "export-1", "epoch-1", "e"), filepath.Join(root, "keep", "sub"), outside, target} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "keep", "sub", "part-1.parquet"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "target"), filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	bucket := "file://" + filepath.ToSlash(root)
	for _, prefix := range []string{"export-1/", "keep/", "../outside/", "link/", "link/empty/", "export-9"} {
		removeEmptyDirs(bucket, prefix)
	}
	if _, err := os.Stat(filepath.Join(root, "export-1")); !os.IsNotExist(err) {
		t.Errorf("export-1/ and its empty directories are still there (%v)", err)
	}
	for _, kept := range []string{filepath.Join(root, "keep", "sub", "part-1.parquet"), outside, target, filepath.Join(root, "link")} {
		if _, err := os.Lstat(kept); err != nil {
			t.Errorf("%s was removed: %v", kept, err)
		}
	}
}
