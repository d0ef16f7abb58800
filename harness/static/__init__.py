"""static"""
