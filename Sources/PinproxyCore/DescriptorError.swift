/// Why a call on a descriptor failed (Interop's `Descriptor`).
public enum DescriptorError: Error, Equatable, Sendable {
    /// The descriptor is not open (`EBADF`).
    case notOpen
    /// Another failure of the named call.
    case system(call: String, errno: Int32)
}
