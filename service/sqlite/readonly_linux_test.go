package sqlite_test

import (
	"os"

	"golang.org/x/sys/unix"
)

// fsImmutableFL is FS_IMMUTABLE_FL of <linux/fs.h>, which x/sys/unix does not name.
const fsImmutableFL = 0x00000010

// setImmutable sets or clears the file's immutable flag, as chattr +i and -i do: while it
// is set nobody, root included, opens the file for writing. It needs CAP_LINUX_IMMUTABLE
// and a file system that keeps the flag (ext4, xfs, btrfs, tmpfs, overlayfs on those).
func setImmutable(path string, on bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		return err
	}
	if on {
		flags |= fsImmutableFL
	} else {
		flags &^= fsImmutableFL
	}
	return unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags))
}
