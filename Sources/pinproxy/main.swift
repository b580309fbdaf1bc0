import PinproxyInterop
print(interopProbe())
